"""Strategic merge patch against a real orch-apiserver, driven by the real clients:
client-side ``kubectl apply`` repeated with changes, ``kubectl patch`` with its
default (strategic) type, and the ``kubernetes`` Python client's patches.

``kubectl apply`` computes its three-way patch from patch metadata it finds in
the server's OpenAPI v3 document (``x-kubernetes-patch-strategy`` and
``x-kubernetes-patch-merge-key``), else from its compiled-in types; the apply
test runs both ways (``KUBECTL_OPENAPIV3_PATCH=false`` forces the compiled-in
types) and checks from kubectl's request log that the server was sent a
strategic merge patch with list directives.
"""

from __future__ import annotations

import json
import re
import subprocess

import pytest
import yaml

from tests.apiserver_fixtures import create_namespace
from tests.helpers import uniq

SMP = "application/strategic-merge-patch+json"


def ok(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0, f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    return result.stdout


@pytest.fixture
def ns(apiserver):
    name = uniq("smp")
    create_namespace(apiserver, name)
    return name


def run_kubectl(kubectl, *args: str, input: str | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    """kubectl with the fixture's private HOME and, optionally, extra environment."""
    return subprocess.run(
        kubectl.argv(*args),
        input=input,
        capture_output=True,
        text=True,
        timeout=60,
        env={**kubectl.env, **(env or {})},
        stdin=None if input is not None else subprocess.DEVNULL,
    )


def deployment(name: str, ns: str, labels: dict, containers: list, replicas: int = 1) -> dict:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": containers}},
        },
    }


def patch_bodies(stderr: str) -> list[tuple[str, dict]]:
    """(content type, body) of every PATCH in kubectl's -v=8 log: a ``"Request Body"
    body="<quoted JSON>"`` line, then the ``PATCH <url>`` line and its request headers."""
    out = []
    lines = stderr.splitlines()
    body = None
    for i, line in enumerate(lines):
        m = re.search(r'"Request Body" body="(.*)"\s*$', line)
        if m:
            body = json.loads('"' + m.group(1) + '"') if m.group(1) else None
            continue
        if re.search(r"\] PATCH https?://", line) and body:
            ctype = ""
            for nxt in lines[i + 1 : i + 8]:
                h = re.search(r"\]\s+Content-Type: (\S+)", nxt)
                if h:
                    ctype = h.group(1)
                    break
            out.append((ctype, json.loads(body)))
            body = None
    return out


def find_key(doc, predicate) -> bool:
    if isinstance(doc, dict):
        return any(predicate(k) or find_key(v, predicate) for k, v in doc.items())
    if isinstance(doc, list):
        return any(find_key(v, predicate) for v in doc)
    return False


@pytest.mark.parametrize("patch_meta", ["default", "compiled-in"])
def test_kubectl_apply_deployment_three_times(kubectl, apiserver, ns, patch_meta):
    env = {"KUBECTL_OPENAPIV3_PATCH": "false"} if patch_meta == "compiled-in" else {}
    name = "web"
    path = f"/apis/apps/v1/namespaces/{ns}/deployments/{name}"
    v1 = deployment(
        name,
        ns,
        {"app": name, "tier": "front", "team": "a"},
        [
            {
                "name": "web",
                "image": "nginx:1",
                "ports": [{"containerPort": 80}, {"containerPort": 8080}],
                "env": [{"name": "A", "value": "1"}],
            },
            {"name": "side", "image": "busybox:1", "command": ["sleep", "1d"]},
        ],
    )
    assert "created" in ok(run_kubectl(kubectl, "apply", "-f", "-", input=yaml.safe_dump(v1), env=env))
    _, live = apiserver.json("GET", path, expect=200)
    web = live["spec"]["template"]["spec"]["containers"][0]
    assert [p["containerPort"] for p in web["ports"]] == [80, 8080]
    # Someone else adds an annotation and a label: apply's three-way patch keeps them.
    ok(run_kubectl(kubectl, "annotate", "-n", ns, "deployment", name, "note=keep"))
    ok(run_kubectl(kubectl, "label", "-n", ns, "deployment", name, "owner=ops"))

    # v2: a container port and a label removed, an image changed, an env var added.
    v2 = deployment(
        name,
        ns,
        {"app": name, "team": "a"},
        [
            {
                "name": "web",
                "image": "nginx:1",
                "ports": [{"containerPort": 80}],
                "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
            },
            {"name": "side", "image": "busybox:2", "command": ["sleep", "1d"]},
        ],
    )
    res = run_kubectl(kubectl, "apply", "-v=8", "-f", "-", input=yaml.safe_dump(v2), env=env)
    assert "configured" in ok(res)
    _, live = apiserver.json("GET", path, expect=200)
    labels = live["metadata"]["labels"]
    assert labels == {"app": name, "team": "a", "owner": "ops"}
    assert live["metadata"]["annotations"]["note"] == "keep"
    web, side = live["spec"]["template"]["spec"]["containers"]
    assert [p["containerPort"] for p in web["ports"]] == [80]
    assert web["env"] == [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]
    assert side["image"] == "busybox:2" and side["command"] == ["sleep", "1d"]
    # Server-side defaults of the kept containers survive the merge.
    assert web["imagePullPolicy"] == "IfNotPresent"
    assert web["terminationMessagePath"] == "/dev/termination-log"
    assert web["ports"][0]["protocol"] == "TCP"
    # Either way kubectl sent a strategic merge patch with list directives: from the
    # markers in the server's OpenAPI v3 document by default, else from its own types.
    patches = patch_bodies(res.stderr)
    assert patches, f"no PATCH request in kubectl's log:\n{res.stderr[-3000:]}"
    ctype, body = patches[-1]
    assert ctype == SMP, (ctype, body)
    assert find_key(body, lambda k: k.startswith("$setElementOrder/")), body
    assert '"$patch":"delete"' in json.dumps(body, separators=(",", ":")), body
    assert body["metadata"]["labels"] == {"tier": None}, body
    if patch_meta == "default":
        assert "/openapi/v3/apis/apps/v1" in res.stderr
        assert "error calculating patch" not in res.stderr, res.stderr[-3000:]

    # v3: a container removed, a label added, the other port list order changed.
    v3 = deployment(
        name,
        ns,
        {"app": name, "team": "a", "stage": "prod"},
        [
            {
                "name": "web",
                "image": "nginx:2",
                "ports": [{"containerPort": 9090}, {"containerPort": 80}],
                "env": [{"name": "B", "value": "2"}],
            },
        ],
        replicas=2,
    )
    assert "configured" in ok(run_kubectl(kubectl, "apply", "-f", "-", input=yaml.safe_dump(v3), env=env))
    _, live = apiserver.json("GET", path, expect=200)
    assert live["metadata"]["labels"] == {"app": name, "team": "a", "stage": "prod", "owner": "ops"}
    assert live["spec"]["replicas"] == 2
    (web,) = live["spec"]["template"]["spec"]["containers"]
    assert web["image"] == "nginx:2"
    assert [p["containerPort"] for p in web["ports"]] == [9090, 80]
    assert web["env"] == [{"name": "B", "value": "2"}]
    last = json.loads(live["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"])
    assert last["metadata"]["labels"] == v3["metadata"]["labels"]

    # Applying the same file again changes nothing.
    out = ok(run_kubectl(kubectl, "apply", "-f", "-", input=yaml.safe_dump(v3), env=env))
    assert "unchanged" in out
    _, again = apiserver.json("GET", path, expect=200)
    # (the deployment controller writes the status meanwhile: the spec and its generation tell)
    assert again["metadata"]["generation"] == live["metadata"]["generation"]
    assert again["spec"] == live["spec"] and again["metadata"]["labels"] == live["metadata"]["labels"]


def test_kubectl_apply_pod_removes_label(kubectl, apiserver, ns):
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": ns, "labels": {"app": "p", "tier": "t"}},
        "spec": {"containers": [{"name": "a", "image": "busybox:1"}, {"name": "b", "image": "busybox:1"}]},
    }
    ok(kubectl("apply", "-f", "-", input=yaml.safe_dump(pod)))
    pod["metadata"]["labels"] = {"app": "p"}
    pod["spec"]["containers"][1]["image"] = "busybox:2"
    assert "configured" in ok(kubectl("apply", "-f", "-", input=yaml.safe_dump(pod)))
    _, live = apiserver.json("GET", f"/api/v1/namespaces/{ns}/pods/p", expect=200)
    assert live["metadata"]["labels"] == {"app": "p"}
    assert [(c["name"], c["image"]) for c in live["spec"]["containers"]] == [("a", "busybox:1"), ("b", "busybox:2")]


def test_kubectl_patch_default_type_on_pod_containers(kubectl, apiserver, ns):
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "pp", "namespace": ns},
        "spec": {
            "containers": [
                {"name": "a", "image": "busybox:1", "command": ["sleep", "1d"]},
                {"name": "b", "image": "busybox:1"},
            ]
        },
    }
    ok(kubectl("create", "-f", "-", input=yaml.safe_dump(pod)))
    out = ok(
        kubectl(
            "patch",
            "pod",
            "pp",
            "-n",
            ns,
            "-p",
            json.dumps({"spec": {"containers": [{"name": "b", "image": "busybox:2"}]}}),
        )
    )
    assert "patched" in out
    _, live = apiserver.json("GET", f"/api/v1/namespaces/{ns}/pods/pp", expect=200)
    a, b = live["spec"]["containers"]
    assert (a["name"], a["image"], a["command"]) == ("a", "busybox:1", ["sleep", "1d"])
    assert (b["name"], b["image"]) == ("b", "busybox:2")
    # A patch that changes nothing says so.
    out = ok(
        kubectl(
            "patch",
            "pod",
            "pp",
            "-n",
            ns,
            "-p",
            json.dumps({"spec": {"containers": [{"name": "b", "image": "busybox:2"}]}}),
        )
    )
    assert "no change" in out
    # The status sub-resource: conditions merge by type.
    status = {
        "status": {"conditions": [{"type": "Ready", "status": "False"}, {"type": "PodScheduled", "status": "True"}]}
    }
    ok(kubectl("patch", "pod", "pp", "-n", ns, "--subresource=status", "-p", json.dumps(status)))
    ok(
        kubectl(
            "patch",
            "pod",
            "pp",
            "-n",
            ns,
            "--subresource=status",
            "-p",
            json.dumps({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
        )
    )
    _, live = apiserver.json("GET", f"/api/v1/namespaces/{ns}/pods/pp", expect=200)
    conds = {c["type"]: c["status"] for c in live["status"]["conditions"]}
    assert conds["Ready"] == "True" and conds["PodScheduled"] == "True"
    assert live["spec"]["containers"][1]["image"] == "busybox:2"
    # A malformed directive is a clean 400 through kubectl.
    res = kubectl("patch", "pod", "pp", "-n", ns, "-p", json.dumps({"metadata": {"labels": {"$patch": "explode"}}}))
    assert res.returncode != 0
    assert "BadRequest" in res.stderr and "$patch" in res.stderr, res.stderr


def test_strategic_patch_errors_over_http(apiserver, ns):
    _, _ = apiserver.json(
        "POST",
        f"/api/v1/namespaces/{ns}/configmaps",
        {"metadata": {"name": "c", "finalizers": ["a.orch.io/x", "b.orch.io/y"]}, "data": {"k": "v"}},
        expect=201,
    )
    path = f"/api/v1/namespaces/{ns}/configmaps/c"
    hdr = {"Content-Type": SMP}
    status, doc = apiserver.json("PATCH", path, ["not", "an", "object"], hdr)
    assert status == 400 and doc["reason"] == "BadRequest", doc
    status, doc = apiserver.json("PATCH", path, {"metadata": {"$retainKeys": "name"}}, hdr)
    assert status == 400 and "$retainKeys" in doc["message"], doc
    status, doc = apiserver.json("PATCH", path, {"metadata": {"finalizers": [{"name": "x"}]}}, hdr)
    assert status == 422 and doc["code"] == 422, doc
    # $deleteFromPrimitiveList on finalizers, as kubectl sends it.
    _, cm = apiserver.json(
        "PATCH",
        path,
        {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a.orch.io/x"]}, "data": {"k2": "v2"}},
        hdr,
        expect=200,
    )
    assert cm["metadata"]["finalizers"] == ["b.orch.io/y"]
    assert cm["data"] == {"k": "v", "k2": "v2"}
    apiserver.json("PATCH", path, {"metadata": {"finalizers": None}}, hdr, expect=200)


def test_python_client_strategic_and_merge_patches(k8s_client, ns):
    from kubernetes import client

    apps = client.AppsV1Api(k8s_client)
    v1 = client.CoreV1Api(k8s_client)
    dep = client.V1Deployment(
        metadata=client.V1ObjectMeta(name="d", labels={"a": "1", "b": "2"}),
        spec=client.V1DeploymentSpec(
            replicas=1,
            selector=client.V1LabelSelector(match_labels={"app": "d"}),
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels={"app": "d"}),
                spec=client.V1PodSpec(
                    containers=[
                        client.V1Container(name="x", image="busybox:1"),
                        client.V1Container(name="y", image="busybox:1"),
                    ]
                ),
            ),
        ),
    )
    apps.create_namespaced_deployment(ns, dep)
    # A dict body is sent as a strategic merge patch: containers merge by name.
    got = apps.patch_namespaced_deployment(
        "d",
        ns,
        {
            "metadata": {"labels": {"b": None}},
            "spec": {"template": {"spec": {"containers": [{"name": "y", "image": "busybox:2"}]}}},
        },
    )
    assert got.metadata.labels == {"a": "1"}
    assert [(c.name, c.image) for c in got.spec.template.spec.containers] == [("x", "busybox:1"), ("y", "busybox:2")]
    # The same body as a merge patch replaces the list.
    got = apps.patch_namespaced_deployment(
        "d",
        ns,
        {"spec": {"template": {"spec": {"containers": [{"name": "y", "image": "busybox:3"}]}}}},
        _content_type="application/merge-patch+json",
    )
    assert [(c.name, c.image) for c in got.spec.template.spec.containers] == [("y", "busybox:3")]

    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name="pp"),
        spec=client.V1PodSpec(
            containers=[
                client.V1Container(name="m", image="busybox:1"),
                client.V1Container(name="n", image="busybox:1"),
            ]
        ),
    )
    v1.create_namespaced_pod(ns, pod)
    got = v1.patch_namespaced_pod("pp", ns, {"spec": {"containers": [{"name": "m", "image": "busybox:9"}]}})
    assert [(c.name, c.image) for c in got.spec.containers] == [("m", "busybox:9"), ("n", "busybox:1")]
    got = v1.patch_namespaced_pod(
        "pp", ns, {"metadata": {"labels": {"x": "y"}}}, _content_type="application/merge-patch+json"
    )
    assert got.metadata.labels == {"x": "y"}
    # Status through the client's strategic default.
    got = v1.patch_namespaced_pod_status("pp", ns, {"status": {"conditions": [{"type": "Ready", "status": "False"}]}})
    assert [(c.type, c.status) for c in got.status.conditions if c.type == "Ready"] == [("Ready", "False")]
