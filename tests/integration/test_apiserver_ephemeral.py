"""The ``pods/ephemeralcontainers`` sub-resource against a real orch-apiserver: what it
accepts (strategic merge, JSON patch, PUT; kubectl debug 1.27 and 1.32; the Python
client), what it refuses (upstream's rules), and who may write it."""

from __future__ import annotations

import json

import pytest

from apiserver_min.api import names
from tests.apiserver_fixtures import Kubectl, apiserver, create_namespace, kubectl_binary  # noqa: F401 - fixture

NS = "eph"
PODS = f"/api/v1/namespaces/{NS}/pods"
SMP = {"Content-Type": names.MEDIA_STRATEGIC_MERGE_PATCH}
JSON_PATCH = {"Content-Type": names.MEDIA_JSON_PATCH}


@pytest.fixture(scope="module")
def server(apiserver):  # noqa: F811 - the imported fixture, by name
    create_namespace(apiserver, NS)
    return apiserver


def make_pod(server, name: str, spec: dict | None = None, **meta) -> dict:
    body = {
        "metadata": {"name": name, **meta},
        "spec": {
            "containers": [{"name": "app", "image": "busybox"}],
            "initContainers": [{"name": "i", "image": "b"}],
            **(spec or {}),
        },
    }
    return server.json("POST", PODS, body, expect=201)[1]


def ephemeral(name: str, **fields) -> dict:
    return {"name": name, "image": "busybox", **fields}


def add(server, pod: str, *containers: dict, expect=200) -> tuple[int, dict]:
    patch = {"spec": {"ephemeralContainers": list(containers)}}
    return server.json("PATCH", f"{PODS}/{pod}/ephemeralcontainers", patch, SMP, expect=expect)


def causes(doc: dict) -> list[tuple[str, str, str]]:
    return [(c["reason"], c["field"], c["message"]) for c in doc["details"]["causes"]]


def test_discovery_lists_the_subresource(server):
    _, doc = server.json("GET", "/api/v1", expect=200)
    found = [r for r in doc["resources"] if r["name"] == "pods/ephemeralcontainers"]
    assert found == [
        {
            "name": "pods/ephemeralcontainers",
            "singularName": "",
            "namespaced": True,
            "kind": "Pod",
            "verbs": found[0]["verbs"],
        }
    ]
    assert sorted(found[0]["verbs"]) == ["get", "patch", "update"]


def test_patch_put_and_get_add_containers_and_nothing_else(server):
    make_pod(server, "p1")
    # A strategic merge patch as kubectl debug sends it; the other spec change in it is dropped.
    patch = {
        "spec": {
            "ephemeralContainers": [ephemeral("dbg", targetContainerName="app", stdin=True, tty=True, resources={})],
            "activeDeadlineSeconds": 5,
        },
        "metadata": {"labels": {"sneaky": "x"}},
    }
    _, pod = server.json("PATCH", f"{PODS}/p1/ephemeralcontainers", patch, SMP, expect=200)
    assert pod["kind"] == "Pod"
    [dbg] = pod["spec"]["ephemeralContainers"]
    assert dbg["targetContainerName"] == "app" and dbg["stdin"] and dbg["tty"]
    assert dbg["terminationMessagePolicy"] == "File" and dbg["imagePullPolicy"] == "Always"  # defaulted
    assert "activeDeadlineSeconds" not in pod["spec"] and "labels" not in pod["metadata"]

    # A JSON patch appends one more; GET of the sub-resource is the pod.
    op = [{"op": "add", "path": "/spec/ephemeralContainers/-", "value": ephemeral("dbg2")}]
    server.json("PATCH", f"{PODS}/p1/ephemeralcontainers", op, JSON_PATCH, expect=200)
    _, got = server.json("GET", f"{PODS}/p1/ephemeralcontainers", expect=200)
    assert [c["name"] for c in got["spec"]["ephemeralContainers"]] == ["dbg", "dbg2"]

    # PUT of the whole pod with a third one.
    got["spec"]["ephemeralContainers"].append(ephemeral("dbg3"))
    _, put = server.json("PUT", f"{PODS}/p1/ephemeralcontainers", got, expect=200)
    assert [c["name"] for c in put["spec"]["ephemeralContainers"]] == ["dbg", "dbg2", "dbg3"]
    entry = [m for m in put["metadata"]["managedFields"] if m.get("subresource") == "ephemeralcontainers"]
    assert entry, put["metadata"]["managedFields"]

    # Once added, neither removed nor changed.
    removed = json.loads(json.dumps(put))
    removed["spec"]["ephemeralContainers"].pop(0)
    status, doc = server.json("PUT", f"{PODS}/p1/ephemeralcontainers", removed, expect=422)
    assert causes(doc) == [
        (
            "FieldValueForbidden",
            "spec.ephemeralContainers",
            'Forbidden: existing ephemeral containers "dbg" may not be removed\n',
        )
    ]
    changed = json.loads(json.dumps(put))
    changed["spec"]["ephemeralContainers"][1]["image"] = "other"
    _, doc = server.json("PUT", f"{PODS}/p1/ephemeralcontainers", changed, expect=422)
    [(reason, field, message)] = causes(doc)
    assert (reason, field) == ("FieldValueForbidden", "spec.ephemeralContainers[dbg2]")
    assert message.startswith('Forbidden: existing ephemeral containers "dbg2" may not be changed\n'), message
    assert "image" in message

    # A plain pod update may not touch them.
    _, plain = server.json("GET", f"{PODS}/p1", expect=200)
    plain["spec"]["ephemeralContainers"].append(ephemeral("sneak"))
    _, doc = server.json("PUT", f"{PODS}/p1", plain, expect=422)
    assert "pod updates may not change fields" in doc["message"], doc


@pytest.mark.parametrize(
    "fields, field, message",
    [
        ({"ports": [{"containerPort": 80}]}, "ports", "Forbidden: cannot be set for an Ephemeral Container"),
        ({"resources": {"limits": {"cpu": "1"}}}, "resources", "Forbidden: cannot be set for an Ephemeral Container"),
        (
            {"readinessProbe": {"exec": {"command": ["true"]}}},
            "readinessProbe",
            "Forbidden: cannot be set for an Ephemeral Container",
        ),
        (
            {"lifecycle": {"preStop": {"exec": {"command": ["true"]}}}},
            "lifecycle",
            "Forbidden: cannot be set for an Ephemeral Container",
        ),
        ({"targetContainerName": "nope"}, "targetContainerName", 'Not found: "nope"'),
    ],
)
def test_refused_fields(server, fields, field, message):
    name = f"r-{field.lower()}"
    make_pod(server, name)
    _, doc = add(server, name, ephemeral("dbg", **fields), expect=422)
    assert (field and f"spec.ephemeralContainers[0].{field}", message) in [(f, m) for _, f, m in causes(doc)], doc


def test_names_unique_across_all_containers(server):
    make_pod(server, "dup")
    for taken in ("app", "i"):
        _, doc = add(server, "dup", ephemeral(taken), expect=422)
        assert ("FieldValueDuplicate", "spec.ephemeralContainers[0].name", f'Duplicate value: "{taken}"') in causes(doc)


def test_static_pods_take_none(server):
    make_pod(server, "mirror", {"nodeName": "n1"}, annotations={names.ANNOTATION_CONFIG_MIRROR: "abc"})
    _, doc = add(server, "mirror", ephemeral("dbg"), expect=422)
    assert doc["message"] == 'Pod "mirror" is invalid: []: Forbidden: static pods do not support ephemeral containers'


def test_create_with_ephemeral_containers_is_refused(server):
    body = {
        "metadata": {"name": "c"},
        "spec": {"containers": [{"name": "a", "image": "b"}], "ephemeralContainers": [ephemeral("d")]},
    }
    _, doc = server.json("POST", PODS, body, expect=422)
    assert ("FieldValueForbidden", "spec.ephemeralContainers", "Forbidden: cannot be set on create") in causes(doc)


def test_who_may_write_it(server):
    """Upstream's default roles leave it out of edit and admin (only cluster-admin has it),
    and a node may not write it."""
    server.json(
        "POST",
        f"/apis/{names.RBAC_GROUP}/v1/namespaces/{NS}/rolebindings",
        {
            "metadata": {"name": "dev-admin"},
            "roleRef": {"apiGroup": names.RBAC_GROUP, "kind": "ClusterRole", "name": "admin"},
            "subjects": [{"kind": "User", "name": "dev", "apiGroup": names.RBAC_GROUP}],
        },
        expect=201,
    )

    def allowed(user: str, groups: list[str], verb: str, sub: str) -> bool:
        spec = {
            "user": user,
            "groups": groups,
            "resourceAttributes": {"namespace": NS, "verb": verb, "resource": "pods", "subresource": sub, "name": "p1"},
        }
        _, doc = server.json(
            "POST", f"/apis/{names.AUTHORIZATION_GROUP}/v1/subjectaccessreviews", {"spec": spec}, expect=201
        )
        return bool(doc["status"].get("allowed"))

    assert allowed("dev", ["system:authenticated"], "create", "exec")
    assert not allowed("dev", ["system:authenticated"], "patch", "ephemeralcontainers")
    assert not allowed("system:node:n1", ["system:nodes", "system:authenticated"], "patch", "ephemeralcontainers")
    assert allowed("root", ["system:masters"], "patch", "ephemeralcontainers")


def test_python_client_patches_the_subresource(server):
    kubernetes = pytest.importorskip("kubernetes")
    make_pod(server, "py")
    client = kubernetes.config.new_client_from_config(config_file=str(server.kubeconfig))
    try:
        core = kubernetes.client.CoreV1Api(client)
        body = {"spec": {"ephemeralContainers": [ephemeral("dbg", targetContainerName="app")]}}
        pod = core.patch_namespaced_pod_ephemeralcontainers("py", NS, body)
        assert [c.name for c in pod.spec.ephemeral_containers] == ["dbg"]
        assert pod.spec.ephemeral_containers[0].target_container_name == "app"
    finally:
        client.close()


@pytest.mark.parametrize("version", ["1.27", "1.32"])
def test_kubectl_debug_adds_an_ephemeral_container(server, tmp_path, version):
    """kubectl debug (no -it: nothing to attach to without a node) adds the container as it
    would before attaching."""
    pod = f"k{version.replace('.', '')}"
    make_pod(server, pod)
    kubectl = Kubectl(server, tmp_path, kubectl_binary(version))
    r = kubectl("debug", "-n", NS, pod, "--image=busybox", "--target=app", "--", "sh", check=True)
    assert "Defaulting debug container name to debugger-" in r.stdout + r.stderr, r
    _, got = server.json("GET", f"{PODS}/{pod}", expect=200)
    [dbg] = got["spec"]["ephemeralContainers"]
    assert dbg["name"].startswith("debugger-") and dbg["targetContainerName"] == "app"
    assert dbg["command"] == ["sh"] and dbg["image"] == "busybox"


def test_pod_security_judges_what_is_added(server):
    """PodSecurity admission sees writes of the sub-resource: a privileged ephemeral
    container is refused where the namespace enforces baseline."""
    ns = "eph-baseline"
    create_namespace(server, ns)
    label = {"metadata": {"labels": {names.POD_SECURITY_PREFIX + "enforce": "baseline"}}}
    server.json("PATCH", f"/api/v1/namespaces/{ns}", label, {"Content-Type": names.MEDIA_MERGE_PATCH}, expect=200)
    pods = f"/api/v1/namespaces/{ns}/pods"
    server.json("POST", pods, {"metadata": {"name": "p"}, "spec": {"containers": [ephemeral("app")]}}, expect=201)
    patch = {"spec": {"ephemeralContainers": [ephemeral("root", securityContext={"privileged": True})]}}
    _, doc = server.json("PATCH", f"{pods}/p/ephemeralcontainers", patch, SMP, expect=403)
    assert 'violates PodSecurity "baseline:latest": privileged' in doc["message"], doc
    plain = {"spec": {"ephemeralContainers": [ephemeral("ok")]}}
    server.json("PATCH", f"{pods}/p/ephemeralcontainers", plain, SMP, expect=200)
