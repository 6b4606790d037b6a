"""The clients of record against a real orch-apiserver: /usr/bin/kubectl with its
default flags, and the ``kubernetes`` Python client.

kubectl runs with a private HOME per server (its discovery cache); every test
works in its own namespace.
"""

from __future__ import annotations

import json
import queue
import subprocess
import threading
import time

import pytest
import yaml

from tests.apiserver_fixtures import ROOT_CA_CONFIGMAP, create_namespace
from tests.helpers import uniq

# --- helpers -----------------------------------------------------------------------------


def ok(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0, f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    return result.stdout


def exists(server, path: str) -> bool:
    status, _, _ = server.request("GET", path)
    assert status in (200, 404)
    return status == 200


def pod_manifest(name: str, ns: str, node: str | None = None, labels: dict | None = None) -> str:
    doc = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, **({"labels": labels} if labels else {})},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }
    if node:
        doc["spec"]["nodeName"] = node
    return yaml.safe_dump(doc)


def cm_manifest(
    name: str, ns: str, labels: dict | None = None, finalizers: list | None = None, data: dict | None = None
) -> str:
    md = {"name": name, "namespace": ns}
    if labels:
        md["labels"] = labels
    if finalizers:
        md["finalizers"] = finalizers
    return yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap", "metadata": md, "data": data or {"k": "v"}})


@pytest.fixture
def ns(apiserver):
    name = uniq("ns")
    create_namespace(apiserver, name)
    return name


# --- kubectl -----------------------------------------------------------------------------


def test_kubectl_version(kubectl):
    out = ok(kubectl("version"))
    assert "Server Version: v1." in out
    doc = json.loads(ok(kubectl("version", "-o", "json")))
    assert doc["serverVersion"]["gitVersion"].startswith("v1.")


def test_kubectl_api_resources(kubectl):
    out = ok(kubectl("api-resources"))
    lines: dict[str, list[str]] = {}
    for ln in out.splitlines()[1:]:
        if ln.strip():  # the first row of a name (pods: the core group's, before the resource metrics')
            lines.setdefault(ln.split()[0], ln.split())
    assert lines["pods"][1] == "po"
    assert lines["deployments"][1] == "deploy"
    assert lines["namespaces"][1] == "ns"
    assert "leases" in lines and "coordination.orch.io/v1" in lines["leases"]
    assert "Lease" in lines["leases"]
    # Short names resolve.
    ok(kubectl("get", "po", "-n", "default"))
    ok(kubectl("get", "deploy", "-A"))


def test_kubectl_get_namespaces(kubectl):
    out = ok(kubectl("get", "ns"))
    header, *rows = out.splitlines()
    assert header.split() == ["NAME", "STATUS", "AGE"]
    got = {r.split()[0]: r.split()[1] for r in rows}
    for name in ("default", "orch-system", "orch-public", "orch-node-lease"):
        assert got[name] == "Active"
    out = ok(kubectl("get", "ns", "-o", "name"))
    assert "namespace/default" in out.split()


def test_kubectl_get_pods_all_namespaces_and_output_formats(kubectl, apiserver, ns):
    ok(kubectl("create", "-f", "-", input=pod_manifest("p1", ns, node="node-a", labels={"app": "web"})))
    ok(kubectl("create", "-f", "-", input=pod_manifest("p2", ns, labels={"app": "db"})))

    out = ok(kubectl("get", "pods", "-A"))
    header, *rows = out.splitlines()
    assert header.split()[:6] == ["NAMESPACE", "NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    mine = [r.split() for r in rows if r.split()[0] == ns]
    assert sorted(r[1] for r in mine) == ["p1", "p2"]
    assert all(r[2] == "0/1" and r[3] == "Pending" for r in mine), mine

    out = ok(kubectl("get", "pods", "-n", ns, "-o", "wide"))
    header, *rows = out.splitlines()
    assert "NODE" in header.split() and "IP" in header.split()
    node_col = header.split().index("NODE")
    cells = {r.split()[0]: r.split() for r in rows}
    assert cells["p1"][node_col] == "node-a"

    doc = yaml.safe_load(ok(kubectl("get", "pod", "p1", "-n", ns, "-o", "yaml")))
    assert doc["kind"] == "Pod" and doc["metadata"]["name"] == "p1"
    assert doc["spec"]["nodeName"] == "node-a"
    doc = json.loads(ok(kubectl("get", "pods", "-n", ns, "-o", "json")))
    assert doc["kind"] == "List" or doc["kind"] == "PodList"
    assert sorted(i["metadata"]["name"] for i in doc["items"]) == ["p1", "p2"]
    assert ok(kubectl("get", "pods", "-n", ns, "-o", "name")).split() == ["pod/p1", "pod/p2"]

    out = ok(kubectl("get", "pods", "-n", ns, "-l", "app=web", "-o", "name"))
    assert out.split() == ["pod/p1"]
    out = ok(kubectl("get", "pods", "-n", ns, "--field-selector", "spec.nodeName=node-a", "-o", "name"))
    assert out.split() == ["pod/p1"]
    out = ok(kubectl("get", "pods", "-n", ns, "--show-labels"))
    assert "app=web" in out and "app=db" in out
    out = ok(kubectl("get", "pods", "-A", "-L", "app"))
    assert "APP" in out.splitlines()[0]


def test_kubectl_chunk_size(kubectl, apiserver, ns):
    for i in range(5):
        apiserver.json("POST", f"/api/v1/namespaces/{ns}/configmaps", {"metadata": {"name": f"cm{i}"}}, expect=201)
    # Six ConfigMaps in three chunks: cm0..cm4 and the namespace's root CA ConfigMap.
    out = ok(kubectl("get", "configmaps", "-n", ns, "--chunk-size=2"))
    header, *rows = out.splitlines()
    assert header.split()[0] == "NAME"
    assert [r.split()[0] for r in rows] == [f"cm{i}" for i in range(5)] + [ROOT_CA_CONFIGMAP]
    out = ok(kubectl("get", "configmaps", "-n", ns, "--chunk-size=2", "-o", "name"))
    assert out.split() == [f"configmap/cm{i}" for i in range(5)] + [f"configmap/{ROOT_CA_CONFIGMAP}"]


def test_kubectl_create_configmap_and_lease_from_files(kubectl, apiserver, ns):
    out = ok(kubectl("create", "-f", "-", input=cm_manifest("from-file", ns, data={"a": "1"})))
    assert "configmap/from-file created" in out
    _, cm = apiserver.json("GET", f"/api/v1/namespaces/{ns}/configmaps/from-file", expect=200)
    assert cm["data"] == {"a": "1"}

    lease = {
        "apiVersion": "coordination.orch.io/v1",
        "kind": "Lease",
        "metadata": {"name": "my-lease", "namespace": ns},
        "spec": {"holderIdentity": "me", "leaseDurationSeconds": 15},
    }
    out = ok(kubectl("create", "-f", "-", input=yaml.safe_dump(lease)))
    assert "lease.coordination.orch.io/my-lease created" in out
    out = ok(kubectl("get", "leases", "-n", ns))
    assert "my-lease" in out
    # Creating it again fails cleanly with AlreadyExists.
    res = kubectl("create", "-f", "-", input=yaml.safe_dump(lease))
    assert res.returncode != 0
    assert "AlreadyExists" in res.stderr and "already exists" in res.stderr


def test_kubectl_apply_new_object(kubectl, apiserver, ns):
    out = ok(kubectl("apply", "-f", "-", input=cm_manifest("applied", ns, data={"x": "1"})))
    assert "configmap/applied created" in out
    _, cm = apiserver.json("GET", f"/api/v1/namespaces/{ns}/configmaps/applied", expect=200)
    assert cm["data"] == {"x": "1"}
    assert "kubectl.kubernetes.io/last-applied-configuration" in cm["metadata"]["annotations"]
    # A grouped kind (merge patch on re-apply).
    lease = {
        "apiVersion": "coordination.orch.io/v1",
        "kind": "Lease",
        "metadata": {"name": "applied-lease", "namespace": ns},
        "spec": {"holderIdentity": "a"},
    }
    assert "created" in ok(kubectl("apply", "-f", "-", input=yaml.safe_dump(lease)))
    lease["spec"]["holderIdentity"] = "b"
    assert "configured" in ok(kubectl("apply", "-f", "-", input=yaml.safe_dump(lease)))
    _, got = apiserver.json("GET", f"/apis/coordination.orch.io/v1/namespaces/{ns}/leases/applied-lease", expect=200)
    assert got["spec"]["holderIdentity"] == "b"


def test_kubectl_create_dry_run_server(kubectl, apiserver, ns):
    out = ok(kubectl("create", "--dry-run=server", "-f", "-", input=cm_manifest("dry", ns)))
    assert "configmap/dry created (server dry run)" in out
    assert not exists(apiserver, f"/api/v1/namespaces/{ns}/configmaps/dry")
    doc = yaml.safe_load(
        ok(kubectl("create", "--dry-run=server", "-o", "yaml", "-f", "-", input=pod_manifest("drypod", ns)))
    )
    assert doc["metadata"]["uid"]
    assert not exists(apiserver, f"/api/v1/namespaces/{ns}/pods/drypod")


def test_kubectl_delete(kubectl, apiserver, ns):
    ok(kubectl("create", "-f", "-", input=cm_manifest("gone", ns)))
    out = ok(kubectl("delete", "configmap", "gone", "-n", ns))
    assert 'configmap "gone" deleted' in out
    assert not exists(apiserver, f"/api/v1/namespaces/{ns}/configmaps/gone")
    res = kubectl("delete", "configmap", "gone", "-n", ns)
    assert res.returncode != 0 and "NotFound" in res.stderr
    # An unbound pod is deleted at once and `kubectl delete` returns.
    ok(kubectl("create", "-f", "-", input=pod_manifest("pod-gone", ns)))
    ok(kubectl("delete", "pod", "pod-gone", "-n", ns, timeout=20))
    assert not exists(apiserver, f"/api/v1/namespaces/{ns}/pods/pod-gone")


def test_kubectl_delete_waits_for_finalizer(kubectl, apiserver, ns):
    path = f"/api/v1/namespaces/{ns}/configmaps/held"
    ok(kubectl("create", "-f", "-", input=cm_manifest("held", ns, finalizers=["example.com/hold"])))
    out = ok(kubectl("delete", "configmap", "held", "-n", ns, "--wait=false"))
    assert 'configmap "held" deleted' in out
    _, cm = apiserver.json("GET", path, expect=200)
    assert cm["metadata"]["deletionTimestamp"]

    # `kubectl delete` (with --wait, the default) returns once the finalizer is gone.
    waiter = kubectl.popen("delete", "configmap", "held", "-n", ns, "--timeout=20s")
    try:
        time.sleep(0.5)
        assert waiter.poll() is None, waiter.communicate()
        ok(kubectl("patch", "configmap", "held", "-n", ns, "--type=merge", "-p", '{"metadata":{"finalizers":null}}'))
        out, err = waiter.communicate(timeout=15)
        assert waiter.returncode == 0, err
    finally:
        if waiter.poll() is None:
            waiter.kill()
            waiter.wait()
    assert not exists(apiserver, path)


def test_kubectl_patch_merge_and_json(kubectl, apiserver, ns):
    ok(kubectl("create", "-f", "-", input=cm_manifest("pt", ns, data={"a": "1"})))
    out = ok(kubectl("patch", "configmap", "pt", "-n", ns, "--type=merge", "-p", '{"data":{"b":"2"}}'))
    assert "configmap/pt patched" in out
    out = ok(
        kubectl(
            "patch",
            "configmap",
            "pt",
            "-n",
            ns,
            "--type=json",
            "-p",
            '[{"op":"replace","path":"/data/a","value":"10"}]',
        )
    )
    assert "patched" in out
    _, cm = apiserver.json("GET", f"/api/v1/namespaces/{ns}/configmaps/pt", expect=200)
    assert cm["data"] == {"a": "10", "b": "2"}
    out = ok(kubectl("patch", "configmap", "pt", "-n", ns, "--type=merge", "-p", '{"data":{"b":"2"}}'))
    assert "no change" in out
    res = kubectl(
        "patch", "configmap", "pt", "-n", ns, "--type=json", "-p", '[{"op":"test","path":"/data/a","value":"nope"}]'
    )
    assert res.returncode != 0
    assert "Invalid" in res.stderr or "invalid" in res.stderr


def test_kubectl_get_raw_readyz(kubectl):
    out = ok(kubectl("get", "--raw", "/readyz?verbose"))
    assert "[+]ping ok" in out
    assert "readyz check passed" in out
    assert ok(kubectl("get", "--raw", "/livez")) == "ok"


def test_kubectl_error_messages(kubectl, ns):
    res = kubectl("get", "configmap", "missing", "-n", ns)
    assert res.returncode != 0
    assert 'Error from server (NotFound): configmaps "missing" not found' in res.stderr
    res = kubectl("delete", "namespace", "default")
    assert res.returncode != 0
    assert "Error from server (Forbidden)" in res.stderr


def test_kubectl_get_watch(kubectl, apiserver, ns):
    proc = kubectl.popen("get", "pods", "-n", ns, "-w")
    lines: queue.Queue = queue.Queue()

    def reader():
        for line in proc.stdout:
            lines.put(line.rstrip("\n"))
        lines.put(None)

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    try:
        time.sleep(1.0)  # let it list and start watching
        assert proc.poll() is None, proc.stderr.read()
        ok(kubectl("create", "-f", "-", input=pod_manifest("watched", ns)))
        seen = []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                line = lines.get(timeout=0.2)
            except queue.Empty:
                continue
            if line is None:
                break
            seen.append(line)
            if line.split() and line.split()[0] == "watched":
                break
        rows = [ln.split() for ln in seen if ln.split() and ln.split()[0] == "watched"]
        assert rows, (seen, proc.poll())
        assert rows[0][1] == "0/1" and rows[0][2] == "Pending"
    finally:
        proc.kill()
        proc.wait(5)


def test_kubectl_explain(kubectl):
    out = ok(kubectl("explain", "pods"))
    assert "KIND:" in out and "Pod" in out


def test_kubectl_label_annotate_and_get_all(kubectl, apiserver, ns):
    ok(kubectl("create", "-f", "-", input=cm_manifest("lab", ns)))
    assert "labeled" in ok(kubectl("label", "configmap", "lab", "-n", ns, "tier=web"))
    assert "annotated" in ok(kubectl("annotate", "configmap", "lab", "-n", ns, "note=hello"))
    _, cm = apiserver.json("GET", f"/api/v1/namespaces/{ns}/configmaps/lab", expect=200)
    assert cm["metadata"]["labels"] == {"tier": "web"}
    assert cm["metadata"]["annotations"]["note"] == "hello"
    assert ok(kubectl("get", "cm", "-n", ns, "-l", "tier=web", "-o", "name")).split() == ["configmap/lab"]
    ok(kubectl("create", "-f", "-", input=pod_manifest("allpod", ns)))
    out = ok(kubectl("get", "all", "-n", ns))
    assert "pod/allpod" in out


def test_kubectl_logs_without_an_agent_fail_cleanly(kubectl, ns):
    """Logs need a node agent: clean Status errors, no stack traces."""
    # A pod no node runs has an empty log (upstream); one bound to an unknown node has no agent.
    ok(kubectl("create", "-f", "-", input=pod_manifest("nolog", ns)))
    assert ok(kubectl("logs", "nolog", "-n", ns)) == ""
    ok(kubectl("create", "-f", "-", input=pod_manifest("ghostlog", ns, node="no-such-node")))
    res = kubectl("logs", "ghostlog", "-n", ns)
    assert res.returncode != 0
    assert "Error from server (NotFound)" in res.stderr and "no-such-node" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr


def test_kubectl_delete_namespace_waits_until_gone(kubectl, apiserver):
    name = uniq("ns")
    ok(
        kubectl(
            "create",
            "-f",
            "-",
            input=yaml.safe_dump({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}),
        )
    )
    ok(kubectl("create", "-f", "-", input=cm_manifest("inside", name)))
    out = ok(kubectl("delete", "namespace", name, timeout=30))
    assert f'namespace "{name}" deleted' in out
    assert not exists(apiserver, f"/api/v1/namespaces/{name}")
    assert not exists(apiserver, f"/api/v1/namespaces/{name}/configmaps/inside")


def test_kubectl_scale(kubectl, apiserver, ns):
    dep = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "sc", "namespace": ns},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "sc"}},
            "template": {
                "metadata": {"labels": {"app": "sc"}},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]},
            },
        },
    }
    ok(kubectl("create", "-f", "-", input=yaml.safe_dump(dep)))
    ok(kubectl("scale", "deployment", "sc", "-n", ns, "--replicas=3"))
    _, obj = apiserver.json("GET", f"/apis/apps/v1/namespaces/{ns}/deployments/sc", expect=200)
    assert obj["spec"]["replicas"] == 3


# --- the Python client -------------------------------------------------------------------


def test_python_client_crud(k8s_client, ns):
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    v1 = client.CoreV1Api(k8s_client)
    body = client.V1ConfigMap(metadata=client.V1ObjectMeta(name="py", labels={"via": "python"}), data={"a": "1"})
    created = v1.create_namespaced_config_map(ns, body)
    assert created.metadata.uid and created.metadata.resource_version
    assert created.metadata.creation_timestamp is not None

    got = v1.read_namespaced_config_map("py", ns)
    assert got.data == {"a": "1"}
    lst = v1.list_namespaced_config_map(ns, label_selector="via=python")
    assert [i.metadata.name for i in lst.items] == ["py"]
    assert lst.metadata.resource_version

    got.data = {"a": "2"}
    replaced = v1.replace_namespaced_config_map("py", ns, got)
    assert replaced.data == {"a": "2"}
    got.data = {"a": "stale"}
    with pytest.raises(ApiException) as exc:
        v1.replace_namespaced_config_map("py", ns, got)  # got still carries the old resourceVersion
    assert exc.value.status == 409
    assert json.loads(exc.value.body)["reason"] == "Conflict"

    # The client's default for a dict body is a strategic merge patch; merge and JSON patches work too.
    patched = v1.patch_namespaced_config_map("py", ns, {"data": {"b": "3"}})
    assert patched.data == {"a": "2", "b": "3"}
    patched = v1.patch_namespaced_config_map(
        "py", ns, {"data": {"b": "3"}}, _content_type="application/merge-patch+json"
    )
    assert patched.data == {"a": "2", "b": "3"}
    patched = v1.patch_namespaced_config_map(
        "py", ns, [{"op": "add", "path": "/data/c", "value": "4"}], _content_type="application/json-patch+json"
    )
    assert patched.data == {"a": "2", "b": "3", "c": "4"}

    status = v1.delete_namespaced_config_map("py", ns)
    status = status if isinstance(status, dict) else k8s_client.sanitize_for_serialization(status)
    assert status["kind"] == "Status" and status["status"] == "Success"
    with pytest.raises(ApiException) as exc:
        v1.read_namespaced_config_map("py", ns)
    assert exc.value.status == 404

    # Typed objects in other groups.
    apps = client.AppsV1Api(k8s_client)
    dep = client.V1Deployment(
        metadata=client.V1ObjectMeta(name="d"),
        spec=client.V1DeploymentSpec(
            replicas=1,
            selector=client.V1LabelSelector(match_labels={"app": "d"}),
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels={"app": "d"}),
                spec=client.V1PodSpec(containers=[client.V1Container(name="c", image="busybox")]),
            ),
        ),
    )
    apps.create_namespaced_deployment(ns, dep)
    assert [d.metadata.name for d in apps.list_namespaced_deployment(ns).items] == ["d"]


def test_python_client_paging(k8s_client, ns):
    from kubernetes import client

    v1 = client.CoreV1Api(k8s_client)
    for i in range(7):
        v1.create_namespaced_config_map(ns, client.V1ConfigMap(metadata=client.V1ObjectMeta(name=f"pg{i}")))
    names, token, rvs, pages = [], None, set(), 0
    while True:
        kw = {"limit": 3}
        if token:
            kw["_continue"] = token
        page = v1.list_namespaced_config_map(ns, **kw)
        pages += 1
        names += [i.metadata.name for i in page.items]
        rvs.add(page.metadata.resource_version)
        token = page.metadata._continue
        if not token:
            break
    assert pages == 3  # eight items: pg0..pg6 and the namespace's root CA ConfigMap
    assert names == [ROOT_CA_CONFIGMAP] + [f"pg{i}" for i in range(7)]
    assert len(rvs) == 1


def test_python_client_watch(k8s_client, ns):
    from kubernetes import client, watch

    v1 = client.CoreV1Api(k8s_client)
    rv = v1.list_namespaced_config_map(ns).metadata.resource_version

    def writer():
        time.sleep(0.3)
        v1.create_namespaced_config_map(
            ns, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="wcm"), data={"a": "1"})
        )
        v1.patch_namespaced_config_map("wcm", ns, {"data": {"a": "2"}}, _content_type="application/merge-patch+json")
        v1.delete_namespaced_config_map("wcm", ns)

    t = threading.Thread(target=writer)
    t.start()
    w = watch.Watch()
    seen = []
    try:
        for ev in w.stream(v1.list_namespaced_config_map, ns, resource_version=rv, timeout_seconds=10):
            seen.append((ev["type"], ev["object"].metadata.name, dict(ev["object"].data or {})))
            if ev["type"] == "DELETED":
                break
    finally:
        w.stop()
        t.join(10)
    assert seen == [("ADDED", "wcm", {"a": "1"}), ("MODIFIED", "wcm", {"a": "2"}), ("DELETED", "wcm", {"a": "2"})]


def test_python_client_watch_initial_list(k8s_client, ns):
    """Without a resourceVersion the stream starts with the existing objects."""
    from kubernetes import client, watch

    v1 = client.CoreV1Api(k8s_client)
    v1.create_namespaced_config_map(ns, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="pre")))
    w = watch.Watch()
    events = list(w.stream(v1.list_namespaced_config_map, ns, timeout_seconds=1))
    seen = [(e["type"], e["object"].metadata.name) for e in events]
    assert sorted(seen) == [("ADDED", ROOT_CA_CONFIGMAP), ("ADDED", "pre")]
