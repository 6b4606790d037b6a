"""Admission plugins against a real ``orch-apiserver``: PodSecurity (enforce, warn,
levels, exemptions from the admission configuration file, label changes checked
against existing pods), the admission configuration file's start-up errors, and the
small plugins (AlwaysPullImages, NamespaceExists, NamespaceAutoProvision,
PodNodeSelector, ResourceQuota's limitedResources, ...). kubectl shows the refusal and the warning as users see them."""

from __future__ import annotations

import json
import subprocess
import time

import pytest
import yaml

from apiserver_min.api import names
from tests.apiserver_fixtures import APISERVER_BIN, ApiServerProcess, Kubectl, kubectl_binary
from tests.components import free_port
from tests.helpers import uniq, wait_for

EXEMPT_USER = "ci-bot"
LIMITED_CLASS = "quota-limited"  # pods of this priority class need a covering quota (limitedResources)
PS = names.POD_SECURITY_PREFIX


def privileged_pod(name: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "hostNetwork": True,
            "containers": [{"name": "x", "image": "busybox", "securityContext": {"privileged": True}}],
        },
    }


RESTRICTED_VIOLATIONS = (
    "host namespaces (hostNetwork=true), "
    'privileged (container "x" must not set securityContext.privileged=true), '
    'allowPrivilegeEscalation != false (container "x" must set securityContext.allowPrivilegeEscalation=false), '
    'unrestricted capabilities (container "x" must set securityContext.capabilities.drop=["ALL"]), '
    'runAsNonRoot != true (pod or container "x" must set securityContext.runAsNonRoot=true), '
    'seccompProfile (pod or container "x" must set securityContext.seccompProfile.type to '
    '"RuntimeDefault" or "Localhost")'
)


def write_config(tmp_path, plugins: list[dict]) -> str:
    path = tmp_path / "admission.yaml"
    path.write_text(
        yaml.safe_dump(
            {"apiVersion": f"apiserver.config.{names.DOMAIN}/v1", "kind": "AdmissionConfiguration", "plugins": plugins}
        )
    )
    return str(path)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    if not APISERVER_BIN.exists():
        pytest.skip(f"{APISERVER_BIN} missing")
    tmp = tmp_path_factory.mktemp("admission")
    # PodNodeSelector's configuration in a file of its own, named by a relative path.
    (tmp / "nodeselector.yaml").write_text(
        yaml.safe_dump({"podNodeSelectorPluginConfig": {"clusterDefaultNodeSelector": "zone=default"}})
    )
    config = write_config(
        tmp,
        [
            {
                "name": "PodSecurity",
                "configuration": {
                    "apiVersion": f"{names.POD_SECURITY_CONFIG_GROUP}/v1",
                    "kind": "PodSecurityConfiguration",
                    "exemptions": {"usernames": [EXEMPT_USER]},
                },
            },
            {"name": "PodNodeSelector", "path": "nodeselector.yaml"},
            {
                "name": "ResourceQuota",
                "configuration": {
                    "apiVersion": f"apiserver.config.{names.DOMAIN}/v1",
                    "kind": "ResourceQuotaConfiguration",
                    "limitedResources": [
                        {
                            "resource": "pods",
                            "matchScopes": [
                                {"scopeName": "PriorityClass", "operator": "In", "values": [LIMITED_CLASS]}
                            ],
                        }
                    ],
                },
            },
        ],
    )
    s = ApiServerProcess(
        tmp / "data",
        free_port(),
        extra_args=[
            "--admission-control-config-file",
            config,
            "--enable-admission-plugins=AlwaysPullImages,PodNodeSelector,NamespaceAutoProvision",
        ],
    )
    with s:
        yield s


def make_namespace(server, labels: dict | None = None, annotations: dict | None = None) -> str:
    name = uniq("ps")
    md: dict = {"name": name, "labels": labels or {}}
    if annotations:
        md["annotations"] = annotations
    server.json("POST", "/api/v1/namespaces", {"metadata": md}, expect=201)
    wait_for(
        lambda: server.request("GET", f"/api/v1/namespaces/{name}/serviceaccounts/default")[0] == 200,
        what="the default service account",
    )
    return name


@pytest.fixture(params=["default", "1.27"])
def kubectl(request, server, tmp_path):
    """The installed kubectl (its dispatcher's choice), and kubectl 1.27 itself."""
    if request.param == "default":
        return Kubectl(server, tmp_path)
    return Kubectl(server, tmp_path, binary=kubectl_binary(request.param))


def test_enforce_restricted_refuses_a_privileged_pod_listing_every_violation(server, kubectl):
    ns = make_namespace(server, {PS + "enforce": "restricted"})
    status, doc = server.json("POST", f"/api/v1/namespaces/{ns}/pods", privileged_pod("priv"))
    assert status == 403, doc
    assert doc["reason"] == "Forbidden"
    assert (
        doc["message"] == f'pods "priv" is forbidden: violates PodSecurity "restricted:latest": {RESTRICTED_VIOLATIONS}'
    )
    result = kubectl("create", "-n", ns, "-f", "-", input=json.dumps(privileged_pod("priv")))
    assert result.returncode != 0
    assert "Error from server (Forbidden)" in result.stderr
    assert f'violates PodSecurity "restricted:latest": {RESTRICTED_VIOLATIONS}' in result.stderr
    assert server.request("GET", f"/api/v1/namespaces/{ns}/pods/priv")[0] == 404


def test_warn_restricted_admits_the_pod_with_a_kubectl_warning(server, kubectl):
    ns = make_namespace(server, {PS + "warn": "restricted", PS + "warn-version": "v1.27"})
    result = kubectl("create", "-n", ns, "-f", "-", input=json.dumps(privileged_pod("warned")))
    assert result.returncode == 0, result.stderr
    assert f'Warning: would violate PodSecurity "restricted:v1.27": {RESTRICTED_VIOLATIONS}' in result.stderr
    assert "pod/warned created" in result.stdout


def test_pod_controllers_get_warnings_never_refusals(server, kubectl):
    # Only the enforce label: warnings default to the enforce level (since 1.26).
    ns = make_namespace(server, {PS + "enforce": "restricted"})
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": privileged_pod("x")["spec"]},
        },
    }
    result = kubectl("create", "-n", ns, "-f", "-", input=json.dumps(deployment))
    assert result.returncode == 0, result.stderr
    assert f'Warning: would violate PodSecurity "restricted:latest": {RESTRICTED_VIOLATIONS}' in result.stderr
    assert "deployment.apps/web created" in result.stdout


def test_baseline_allows_what_restricted_refuses(server):
    ns = make_namespace(server, {PS + "enforce": "baseline", PS + "warn": "restricted"})
    plain = {"metadata": {"name": "plain"}, "spec": {"containers": [{"name": "x", "image": "busybox"}]}}
    status, headers, body = server.request("POST", f"/api/v1/namespaces/{ns}/pods", plain)
    assert status == 201, body
    warning = headers.get("warning", "")
    assert warning.startswith('299 - "would violate PodSecurity \\"restricted:latest\\": allowPrivilegeEscalation')
    status, doc = server.json("POST", f"/api/v1/namespaces/{ns}/pods", privileged_pod("priv"))
    assert status == 403
    assert doc["message"].endswith(
        'violates PodSecurity "baseline:latest": host namespaces (hostNetwork=true), '
        'privileged (container "x" must not set securityContext.privileged=true)'
    )
    # A refused request carries no warnings.
    assert "warning" not in server.request("POST", f"/api/v1/namespaces/{ns}/pods", privileged_pod("p2"))[1]


def test_a_user_exempt_in_the_configuration_file_passes(server):
    ns = make_namespace(server, {PS + "enforce": "restricted"})
    as_bot = {"Impersonate-User": EXEMPT_USER, "Impersonate-Group": names.GROUP_MASTERS}
    server.json("POST", f"/api/v1/namespaces/{ns}/pods", privileged_pod("exempt"), headers=as_bot, expect=201)
    status, _ = server.json(
        "POST",
        f"/api/v1/namespaces/{ns}/pods",
        privileged_pod("other"),
        headers={"Impersonate-User": "someone-else", "Impersonate-Group": names.GROUP_MASTERS},
    )
    assert status == 403


def test_a_limited_priority_class_needs_a_covering_quota(server):
    server.json(
        "POST",
        f"/apis/{names.SCHEDULING_GROUP}/v1/priorityclasses",
        {"metadata": {"name": LIMITED_CLASS}, "value": 1000},
        expect=201,
    )
    ns = make_namespace(server)
    pod = {
        "metadata": {"name": "limited"},
        "spec": {"priorityClassName": LIMITED_CLASS, "containers": [{"name": "x", "image": "busybox"}]},
    }

    def refused() -> tuple | None:  # (once the Priority plugin knows the class)
        status, doc = server.json("POST", f"/api/v1/namespaces/{ns}/pods", pod)
        return (status, doc) if status != 403 else None

    status, doc = wait_for(refused, what="the priority class known")
    assert (status, doc["message"]) == (
        500,
        f"insufficient quota to match these scopes: [{{PriorityClass In [{LIMITED_CLASS}]}}]",
    ), doc
    scope = {"scopeName": "PriorityClass", "operator": "In", "values": [LIMITED_CLASS]}
    quota = {
        "metadata": {"name": "limited"},
        "spec": {"hard": {"pods": "5"}, "scopeSelector": {"matchExpressions": [scope]}},
    }
    server.json("POST", f"/api/v1/namespaces/{ns}/resourcequotas", quota, expect=201)
    wait_for(lambda: server.json("POST", f"/api/v1/namespaces/{ns}/pods", pod)[0] == 201, what="the pod admitted")


def test_bad_level_labels_are_refused_on_namespace_create(server):
    name = uniq("bad")
    status, doc = server.json(
        "POST", "/api/v1/namespaces", {"metadata": {"name": name, "labels": {PS + "enforce": "strict"}}}
    )
    assert status == 422, doc
    assert doc["message"] == (
        f'Namespace "{name}" is invalid: metadata.labels[{PS}enforce]: Invalid value: "strict": '
        "must be one of privileged, baseline, restricted"
    )
    assert doc["details"]["causes"][0]["field"] == f"metadata.labels[{PS}enforce]"


def warnings_of(server, method: str, path: str, body: dict, content_type: str) -> tuple[int, list[str]]:
    """(status, every Warning header entry of the reply), in order."""
    conn = server.connection()
    try:
        conn.request(method, path, body=json.dumps(body), headers={"Content-Type": content_type})
        resp = conn.getresponse()
        resp.read()
        return resp.status, resp.headers.get_all("Warning") or []
    finally:
        conn.close()


def test_tightening_a_namespace_warns_about_its_existing_pods(server):
    ns = make_namespace(server)
    for name in ("a", "b"):
        server.json("POST", f"/api/v1/namespaces/{ns}/pods", privileged_pod(name), expect=201)
    patch = {"metadata": {"labels": {PS + "enforce": "baseline"}}}
    status, warnings = warnings_of(server, "PATCH", f"/api/v1/namespaces/{ns}", patch, names.MEDIA_MERGE_PATCH)
    assert status == 200
    assert warnings == [
        f'299 - "existing pods in namespace \\"{ns}\\" violate the new PodSecurity enforce level \\"baseline:latest\\""',
        '299 - "a (and 1 other pod): host namespaces, privileged"',
    ]
    # Relaxing it again checks nothing.
    patch = {"metadata": {"labels": {PS + "enforce": "privileged"}}}
    assert warnings_of(server, "PATCH", f"/api/v1/namespaces/{ns}", patch, names.MEDIA_MERGE_PATCH) == (200, [])


def test_always_pull_images_rewrites_the_policy(server):
    ns = make_namespace(server)
    pod = {
        "metadata": {"name": "pull"},
        "spec": {
            "initContainers": [{"name": "i", "image": "busybox", "imagePullPolicy": "Never"}],
            "containers": [{"name": "c", "image": "busybox", "imagePullPolicy": "IfNotPresent"}],
        },
    }
    _, created = server.json("POST", f"/api/v1/namespaces/{ns}/pods", pod, expect=201)
    assert [c["imagePullPolicy"] for c in created["spec"]["initContainers"] + created["spec"]["containers"]] == [
        "Always",
        "Always",
    ]


def test_pod_node_selector_merges_the_namespace_selector(server):
    ns = make_namespace(server, annotations={names.ANNOTATION_NODE_SELECTOR: "disk=ssd"})
    pod = {
        "metadata": {"name": "sel"},
        "spec": {"nodeSelector": {"tier": "web"}, "containers": [{"name": "c", "image": "busybox"}]},
    }
    _, created = server.json("POST", f"/api/v1/namespaces/{ns}/pods", pod, expect=201)
    assert created["spec"]["nodeSelector"] == {"disk": "ssd", "tier": "web"}
    conflicting = {"metadata": {"name": "conf"}, "spec": {**pod["spec"], "nodeSelector": {"disk": "hdd"}}}
    status, doc = server.json("POST", f"/api/v1/namespaces/{ns}/pods", conflicting)
    assert status == 403
    assert doc["message"] == (
        'pods "conf" is forbidden: pod node label selector conflicts with its namespace node label selector'
    )
    # Without the annotation, the cluster default from the configuration file applies.
    plain_ns = make_namespace(server)
    _, created = server.json(
        "POST", f"/api/v1/namespaces/{plain_ns}/pods", {**pod, "metadata": {"name": "d"}}, expect=201
    )
    assert created["spec"]["nodeSelector"] == {"zone": "default", "tier": "web"}


def test_namespace_auto_provision_creates_the_namespace(server):
    ns = uniq("auto")
    server.json("POST", f"/api/v1/namespaces/{ns}/configmaps", {"metadata": {"name": "cm"}}, expect=201)
    server.json("GET", f"/api/v1/namespaces/{ns}", expect=200)
    server.json("GET", f"/api/v1/namespaces/{ns}/configmaps/cm", expect=200)


@pytest.fixture(scope="module")
def exists_server(tmp_path_factory):
    if not APISERVER_BIN.exists():
        pytest.skip(f"{APISERVER_BIN} missing")
    s = ApiServerProcess(
        tmp_path_factory.mktemp("nsexists"),
        free_port(),
        extra_args=["--enable-admission-plugins=NamespaceExists", "--disable-admission-plugins=NamespaceLifecycle"],
    )
    with s:
        yield s


def test_namespace_exists_refuses_a_missing_namespace(exists_server):
    ns = uniq("missing")
    status, doc = exists_server.json("POST", f"/api/v1/namespaces/{ns}/configmaps", {"metadata": {"name": "cm"}})
    assert status == 404, doc
    assert doc["message"] == f'namespaces "{ns}" not found'
    exists_server.json("POST", "/api/v1/namespaces/default/configmaps", {"metadata": {"name": uniq("cm")}}, expect=201)


@pytest.mark.parametrize(
    "plugins, expected",
    [
        ([{"name": "NoSuchPlugin", "configuration": {}}], "unknown admission plugin 'NoSuchPlugin'"),
        (
            [
                {
                    "name": "PodSecurity",
                    "configuration": {
                        "apiVersion": f"{names.POD_SECURITY_CONFIG_GROUP}/v1",
                        "kind": "PodSecurityConfiguration",
                        "defaults": {"enforce": "strict"},
                    },
                }
            ],
            'admission plugin PodSecurity: configuration in {path}: defaults.enforce: Invalid value: "strict"',
        ),
        ([{"name": "PodNodeSelector", "path": "absent.yaml"}], "cannot read configuration file of admission plugin"),
    ],
    ids=["unknown-plugin", "bad-podsecurity", "missing-path"],
)
def test_a_bad_admission_configuration_file_is_a_clear_start_up_error(tmp_path, plugins, expected):
    path = write_config(tmp_path, plugins)
    t0 = time.monotonic()
    result = subprocess.run(
        [str(APISERVER_BIN), "--data-dir", str(tmp_path / "d"), "--admission-control-config-file", path],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2
    assert "--admission-control-config-file: " in result.stderr
    assert expected.format(path=path) in result.stderr
    assert time.monotonic() - t0 < 30
    assert not (tmp_path / "d").exists()  # nothing created before the options are checked
