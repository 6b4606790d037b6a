"""The kind registry: look-ups, uniqueness, field selectors and Table cells."""

from __future__ import annotations

import datetime as dt

import pytest

from apiserver_min.api import names
from apiserver_min.api.kinds import (
    KINDS,
    REGISTRY,
    KindInfo,
    Registry,
    age,
    human_duration,
    pod_status_reason,
)

NOW = dt.datetime(2024, 5, 1, 12, 0, 0, tzinfo=dt.timezone.utc)
CREATED = "2024-05-01T11:00:00Z"


# --- look-ups ------------------------------------------------------------------------------


def test_by_resource_and_by_kind_find_the_same_declaration():
    pods = REGISTRY.by_resource("", "v1", "pods")
    assert pods is not None
    assert pods.kind == "Pod" and pods.namespaced
    assert REGISTRY.by_kind("", "v1", "Pod") is pods
    assert REGISTRY.by_api_version_kind("v1", "Pod") is pods
    deploy = REGISTRY.by_api_version_kind("apps/v1", "Deployment")
    assert deploy is REGISTRY.by_resource("apps", "v1", "deployments")
    assert deploy.api_version == "apps/v1"
    assert deploy.qualified_resource == "deployments.apps"


def test_unknown_look_ups_return_none():
    assert REGISTRY.by_resource("", "v1", "nosuchthings") is None
    assert REGISTRY.by_kind("apps", "v2", "Deployment") is None
    assert REGISTRY.by_api_version_kind("v1", "Deployment") is None


def test_groups_use_the_project_domain():
    csr = REGISTRY.by_kind(names.CERTIFICATES_GROUP, "v1", "CertificateSigningRequest")
    assert csr is not None
    assert csr.api_version == f"certificates.{names.DOMAIN}/v1"
    assert not csr.namespaced
    for k in KINDS:
        assert "k8s.io" not in k.group and "kubernetes.io" not in k.group, k.group


def test_resolve_by_plural_singular_short_name_and_kind():
    for typed in ("pod", "po", "Pod", "POD"):
        assert [(k.group, k.resource) for k in REGISTRY.resolve(typed)] == [("", "pods")], typed
    # The plural also names the pods' resource metrics (metrics.orch.io, as upstream's metrics server).
    assert sorted(k.group for k in REGISTRY.resolve("pods")) == ["", names.METRICS_GROUP]
    assert [k.resource for k in REGISTRY.resolve("ns")] == ["namespaces"]
    assert [k.resource for k in REGISTRY.resolve("deploy")] == ["deployments"]
    assert [k.resource for k in REGISTRY.resolve("csr")] == ["certificatesigningrequests"]
    # Events exist in the core group and in the events group.
    assert sorted(k.group for k in REGISTRY.resolve("ev")) == sorted(["", names.EVENTS_GROUP])
    assert REGISTRY.resolve("nothing-like-this") == []


def test_every_kind_has_a_unique_group_version_resource_and_kind():
    gvrs = [(k.group, k.version, k.resource) for k in KINDS]
    assert len(gvrs) == len(set(gvrs))
    gvks = [(k.group, k.version, k.kind) for k in KINDS]
    assert len(gvks) == len(set(gvks))


def test_a_kind_declared_twice_is_refused():
    pods = REGISTRY.by_resource("", "v1", "pods")
    with pytest.raises(ValueError, match="pods/v1 declared twice"):
        Registry([pods, pods])


def test_list_kind_singular_and_group_versions():
    assert REGISTRY.by_resource("", "v1", "pods").list_kind == "PodList"
    assert REGISTRY.by_resource("", "v1", "endpoints").list_kind == "EndpointsList"
    assert REGISTRY.by_resource("", "v1", "endpoints").singular_name == "endpoints"
    assert REGISTRY.by_resource("apps", "v1", "deployments").singular_name == "deployment"
    gvs = REGISTRY.group_versions()
    assert gvs[0] == ("", "v1")
    assert ("apps", "v1") in gvs and len(gvs) == len(set(gvs))
    assert {k.resource for k in REGISTRY.in_group_version("batch", "v1")} == {"jobs", "cronjobs"}


def test_declarations_are_well_formed():
    for k in KINDS:
        assert k.resource == k.resource.lower() and k.resource, k
        assert k.kind[:1].isupper(), k
        assert set(k.verbs) <= {"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}, k
        assert len({s.name for s in k.subresources}) == len(k.subresources), k
        for c in k.table_columns():
            assert c.type in ("string", "integer", "number", "boolean", "date"), (k.resource, c.name)
            d = c.definition()
            assert set(d) == {"name", "type", "format", "description", "priority"}


def test_subresources():
    pods = REGISTRY.by_resource("", "v1", "pods")
    assert pods.subresource("status").kind == "Pod"
    eviction = pods.subresource("eviction")
    assert (eviction.kind, eviction.group, eviction.verbs) == ("Eviction", "policy", ("create",))
    assert pods.subresource("nope") is None
    scale = REGISTRY.by_resource("apps", "v1", "deployments").subresource("scale")
    assert (scale.kind, scale.group, scale.version) == ("Scale", "autoscaling", "v1")


# --- field selectors ----------------------------------------------------------------------


def test_pod_selectable_fields():
    pods = REGISTRY.by_resource("", "v1", "pods")
    pod = realistic_pod()
    fields = pods.selectable_fields(pod)
    assert fields["metadata.name"] == "web-0"
    assert fields["metadata.namespace"] == "default"
    assert fields["spec.nodeName"] == "node-1"
    assert fields["spec.restartPolicy"] == "Always"
    assert fields["spec.hostNetwork"] == "false"
    assert fields["status.phase"] == "Running"
    assert fields["status.podIP"] == "10.88.0.5"
    assert set(fields) == pods.field_names
    # Absent fields select as the empty string.
    empty = pods.selectable_fields({})
    assert empty["spec.nodeName"] == "" and empty["metadata.name"] == ""


def test_secret_selectable_fields():
    secrets = REGISTRY.by_resource("", "v1", "secrets")
    fields = secrets.selectable_fields(
        {"metadata": {"name": "t", "namespace": "orch-system"}, "type": names.BOOTSTRAP_TOKEN_SECRET_TYPE}
    )
    assert fields == {
        "metadata.name": "t",
        "metadata.namespace": "orch-system",
        "type": f"bootstrap.{names.DOMAIN}/token",
    }


def test_event_selectable_fields():
    events = REGISTRY.by_resource("", "v1", "events")
    ev = {
        "metadata": {"name": "web-0.17a", "namespace": "default"},
        "involvedObject": {
            "kind": "Pod",
            "name": "web-0",
            "namespace": "default",
            "uid": "u-1",
            "apiVersion": "v1",
            "fieldPath": "spec.containers{web}",
        },
        "reason": "Started",
        "type": "Normal",
        "source": {"component": "orch-agent"},
    }
    fields = events.selectable_fields(ev)
    assert fields["involvedObject.kind"] == "Pod"
    assert fields["involvedObject.name"] == "web-0"
    assert fields["involvedObject.uid"] == "u-1"
    assert fields["involvedObject.fieldPath"] == "spec.containers{web}"
    assert fields["involvedObject.resourceVersion"] == ""
    assert fields["reason"] == "Started" and fields["type"] == "Normal"
    assert fields["source"] == "orch-agent"


def test_cluster_scoped_kinds_have_no_namespace_field():
    nodes = REGISTRY.by_resource("", "v1", "nodes")
    fields = nodes.selectable_fields({"metadata": {"name": "n"}, "spec": {"unschedulable": True}})
    assert fields == {"metadata.name": "n", "spec.unschedulable": "true"}
    assert "metadata.namespace" not in nodes.field_names


# --- human durations (upstream's HumanDuration rules) --------------------------------------


@pytest.mark.parametrize(
    "seconds, text",
    [
        (-5, "<invalid>"),
        (-1.5, "0s"),  # up to two seconds of clock skew count as "now"
        (-0.5, "0s"),
        (0, "0s"),
        (1, "1s"),
        (59, "59s"),
        (70, "70s"),
        (119, "119s"),
        (120, "2m"),
        (125, "2m5s"),
        (190, "3m10s"),
        (599, "9m59s"),
        (600, "10m"),
        (70 * 60, "70m"),
        (3 * 3600 - 1, "179m"),
        (3 * 3600, "3h"),
        (3 * 3600 + 5 * 60, "3h5m"),
        (8 * 3600, "8h"),
        (47 * 3600, "47h"),
        (48 * 3600, "2d"),
        (49 * 3600, "2d1h"),
        (51 * 3600, "2d3h"),
        ((8 * 24 + 2) * 3600, "8d"),
        (365 * 86400, "365d"),
        (367 * 86400, "367d"),
        (2 * 365 * 86400, "2y"),
        ((365 * 2 * 24 + 25) * 3600, "2y1d"),
        ((365 * 8 * 24 + 2) * 3600, "8y"),
        (20 * 365 * 86400, "20y"),
    ],
)
def test_human_duration(seconds, text):
    assert human_duration(seconds) == text


def test_age():
    assert age(CREATED, now=NOW) == "60m"
    assert age("2024-05-01T11:59:30.123456Z", now=NOW) == "29s"
    assert age(None, now=NOW) == "<unknown>"
    assert age("yesterday", now=NOW) == "<invalid>"


# --- table cells ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: f"{k.resource}.{k.group or 'core'}")
def test_every_column_computes_on_an_empty_object(kind: KindInfo):
    cells = [c.cell({}) for c in kind.table_columns()]
    assert len(cells) == len(kind.table_columns())
    for c, value in zip(kind.table_columns(), cells):
        assert value is not None, c.name
        assert "None" not in str(value), (c.name, value)
    names_of_columns = [c.name for c in kind.table_columns()]
    assert len(names_of_columns) == len(set(names_of_columns)), names_of_columns


def cells(kind: KindInfo, obj: dict, *, wide: bool = False) -> dict[str, object]:
    return {c.name: c.cell(obj) for c in kind.table_columns() if wide or c.priority == 0}


def realistic_pod() -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web-0", "namespace": "default", "creationTimestamp": CREATED, "labels": {"app": "web"}},
        "spec": {
            "nodeName": "node-1",
            "restartPolicy": "Always",
            "containers": [
                {"name": "web", "image": "orch.local/busybox:1"},
                {"name": "sidecar", "image": "orch.local/busybox:1"},
            ],
        },
        "status": {
            "phase": "Running",
            "podIP": "10.88.0.5",
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [
                {"name": "web", "ready": True, "restartCount": 2, "state": {"running": {"startedAt": CREATED}}},
                {"name": "sidecar", "ready": True, "restartCount": 1, "state": {"running": {"startedAt": CREATED}}},
            ],
        },
    }


def test_pod_table_row():
    pods = REGISTRY.by_resource("", "v1", "pods")
    row = cells(pods, realistic_pod(), wide=True)
    assert row["Name"] == "web-0"
    assert row["Ready"] == "2/2"
    assert row["Status"] == "Running"
    assert row["Restarts"] == "3"
    assert row["IP"] == "10.88.0.5"
    assert row["Node"] == "node-1"
    assert row["Nominated Node"] == "<none>"
    assert row["Readiness Gates"] == "<none>"
    assert isinstance(row["Age"], str) and row["Age"] not in ("<unknown>", "<invalid>")


def test_pod_status_column_reasons():
    pending = {"spec": {"containers": [{"name": "a"}]}, "status": {"phase": "Pending"}}
    assert pod_status_reason(pending) == "Pending"
    waiting = {
        "spec": {"containers": [{"name": "a"}]},
        "status": {
            "phase": "Pending",
            "containerStatuses": [{"name": "a", "state": {"waiting": {"reason": "ContainerCreating"}}}],
        },
    }
    assert pod_status_reason(waiting) == "ContainerCreating"
    crashed = {
        "status": {"phase": "Running", "containerStatuses": [{"name": "a", "state": {"terminated": {"exitCode": 1}}}]}
    }
    assert pod_status_reason(crashed) == "ExitCode:1"
    init = {
        "spec": {"initContainers": [{"name": "i"}, {"name": "j"}]},
        "status": {
            "phase": "Pending",
            "initContainerStatuses": [
                {"name": "i", "state": {"terminated": {"exitCode": 0}}},
                {"name": "j", "state": {"running": {}}},
            ],
        },
    }
    assert pod_status_reason(init) == "Init:1/2"
    deleting = {"metadata": {"deletionTimestamp": CREATED}, "status": {"phase": "Running"}}
    assert pod_status_reason(deleting) == "Terminating"


def test_node_table_row():
    nodes = REGISTRY.by_resource("", "v1", "nodes")
    node = {
        "metadata": {
            "name": "node-1",
            "creationTimestamp": CREATED,
            "labels": {f"node-role.{names.DOMAIN}/control-plane": "", f"node-role.{names.DOMAIN}/worker": ""},
        },
        "spec": {"unschedulable": True},
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "addresses": [{"type": "InternalIP", "address": "192.0.2.10"}, {"type": "Hostname", "address": "node-1"}],
            "nodeInfo": {
                "kubeletVersion": "v0.1.0",
                "osImage": "Debian GNU/Linux 12 (bookworm)",
                "kernelVersion": "6.1.0",
                "containerRuntimeVersion": "containerd://1.6.20",
            },
        },
    }
    row = cells(nodes, node, wide=True)
    assert row["Name"] == "node-1"
    assert row["Status"] == "Ready,SchedulingDisabled"
    assert row["Roles"] == "control-plane,worker"
    assert row["Version"] == "v0.1.0"
    assert row["Internal-IP"] == "192.0.2.10"
    assert row["External-IP"] == "<none>"
    assert row["Container-Runtime"] == "containerd://1.6.20"
    not_ready = {"status": {"conditions": [{"type": "Ready", "status": "False"}]}}
    assert cells(nodes, not_ready)["Status"] == "NotReady"


def test_service_table_row():
    services = REGISTRY.by_resource("", "v1", "services")
    svc = {
        "metadata": {"name": "web", "namespace": "default", "creationTimestamp": CREATED},
        "spec": {
            "type": "NodePort",
            "clusterIP": "10.96.0.10",
            "selector": {"app": "web", "tier": "fe"},
            "ports": [{"port": 80, "nodePort": 30080, "protocol": "TCP"}, {"port": 53, "protocol": "UDP"}],
        },
    }
    row = cells(services, svc, wide=True)
    assert row["Type"] == "NodePort"
    assert row["Cluster-IP"] == "10.96.0.10"
    assert row["External-IP"] == "<none>"
    assert row["Port(s)"] == "80:30080/TCP,53/UDP"
    assert row["Selector"] == "app=web,tier=fe"
    lb = {"spec": {"type": "LoadBalancer", "ports": [{"port": 443}]}}
    assert cells(services, lb)["External-IP"] == "<pending>"
    ext = {"spec": {"type": "ExternalName", "externalName": "db.example.org"}}
    assert cells(services, ext)["External-IP"] == "db.example.org"


def test_deployment_table_row():
    deployments = REGISTRY.by_resource("apps", "v1", "deployments")
    d = {
        "metadata": {"name": "web", "namespace": "default", "creationTimestamp": CREATED},
        "spec": {
            "replicas": 3,
            "selector": {
                "matchLabels": {"app": "web"},
                "matchExpressions": [{"key": "tier", "operator": "In", "values": ["fe", "be"]}],
            },
            "template": {"spec": {"containers": [{"name": "web", "image": "orch.local/busybox:1"}]}},
        },
        "status": {"readyReplicas": 2, "updatedReplicas": 3, "availableReplicas": 2},
    }
    row = cells(deployments, d, wide=True)
    assert row["Ready"] == "2/3"
    assert row["Up-to-date"] == 3
    assert row["Available"] == 2
    assert row["Containers"] == "web"
    assert row["Images"] == "orch.local/busybox:1"
    assert row["Selector"] == "app=web,tier in (be,fe)"


def test_certificate_signing_request_table_row():
    csrs = REGISTRY.by_resource(names.CERTIFICATES_GROUP, "v1", "certificatesigningrequests")
    csr = {
        "metadata": {"name": "node-csr-abc", "creationTimestamp": CREATED},
        "spec": {
            "signerName": names.SIGNER_NODE_AGENT_CLIENT,
            "username": "system:bootstrap:abcdef",
            "expirationSeconds": 86400,
        },
        "status": {"conditions": [{"type": "Approved", "status": "True"}], "certificate": "LS0t"},
    }
    row = cells(csrs, csr)
    assert row["SignerName"] == f"{names.DOMAIN}/apiserver-client-node-agent"
    assert row["Requestor"] == "system:bootstrap:abcdef"
    assert row["RequestedDuration"] == "24h"
    assert row["Condition"] == "Approved,Issued"
    assert cells(csrs, {})["Condition"] == "Pending"
    assert cells(csrs, {"status": {"conditions": [{"type": "Denied"}]}})["Condition"] == "Denied"


def test_pod_template_table_row():
    templates = REGISTRY.by_resource("", "v1", "podtemplates")
    t = {
        "metadata": {"name": "tmpl"},
        "template": {
            "metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "a", "image": "img-a"}, {"name": "b", "image": "img-b"}]},
        },
    }
    assert cells(templates, t) == {
        "Template": "tmpl",
        "Containers": "a,b",
        "Images": "img-a,img-b",
        "Pod Labels": "app=web",
    }


def test_role_binding_table_row():
    rb = REGISTRY.by_resource(names.RBAC_GROUP, "v1", "rolebindings")
    obj = {
        "metadata": {"name": "rb"},
        "roleRef": {"kind": "ClusterRole", "name": "view"},
        "subjects": [
            {"kind": "User", "name": "alice"},
            {"kind": "Group", "name": "devs"},
            {"kind": "ServiceAccount", "name": "default", "namespace": "orch-system"},
        ],
    }
    row = cells(rb, obj, wide=True)
    assert row["Role"] == "ClusterRole/view"
    assert (row["Users"], row["Groups"], row["ServiceAccounts"]) == ("alice", "devs", "orch-system/default")
