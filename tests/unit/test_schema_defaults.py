"""Defaulting on create/update: upstream's values, in place, tolerant of bad input."""

from __future__ import annotations

import copy

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from apiserver_min.api import names
from apiserver_min.api.defaults import apply_defaults, default_pull_policy, image_tag
from apiserver_min.api.kinds import REGISTRY


def defaulted(group: str, kind: str, obj: dict, version: str = "v1") -> dict:
    apply_defaults(group, version, kind, obj)
    return obj


def pod(**spec) -> dict:
    base = {"containers": [{"name": "c", "image": "busybox:1.36"}]}
    base.update(spec)
    return defaulted("", "Pod", {"metadata": {"name": "p"}, "spec": base})


# --- images ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "image,tag,policy",
    [
        ("busybox", "latest", "Always"),
        ("busybox:latest", "latest", "Always"),
        ("docker.io/library/busybox", "latest", "Always"),
        ("localhost:5000/app", "latest", "Always"),
        ("busybox:1.36", "1.36", "IfNotPresent"),
        ("localhost:5000/app:v2", "v2", "IfNotPresent"),
        ("registry.example/team/app@sha256:" + "ab" * 32, "", "IfNotPresent"),
        ("app:v1@sha256:" + "ab" * 32, "v1", "IfNotPresent"),
        ("app:latest@sha256:" + "ab" * 32, "latest", "Always"),
        ("", "", "IfNotPresent"),
        ("Busybox", "", "IfNotPresent"),  # unparseable: upstream ignores the error, finds no tag
        ("app:", "", "IfNotPresent"),
        (None, "", "IfNotPresent"),
    ],
)
def test_pull_policy_follows_the_tag(image, tag, policy):
    assert image_tag(image) == tag
    assert default_pull_policy(image) == policy


# --- pods ------------------------------------------------------------------------------------


def test_pod_spec_defaults():
    spec = pod()["spec"]
    assert spec["restartPolicy"] == "Always"
    assert spec["dnsPolicy"] == "ClusterFirst"
    assert spec["terminationGracePeriodSeconds"] == 30
    assert spec["schedulerName"] == "default-scheduler"
    assert spec["securityContext"] == {}
    assert spec["enableServiceLinks"] is True
    assert "priority" not in spec and "preemptionPolicy" not in spec  # Priority admission's job
    c = spec["containers"][0]
    assert c["imagePullPolicy"] == "IfNotPresent"
    assert c["terminationMessagePath"] == "/dev/termination-log"
    assert c["terminationMessagePolicy"] == "File"


def test_pod_defaults_keep_given_values():
    spec = pod(
        restartPolicy="Never",
        dnsPolicy="Default",
        terminationGracePeriodSeconds=0,
        enableServiceLinks=False,
        securityContext={"runAsUser": 1},
    )["spec"]
    assert spec["restartPolicy"] == "Never" and spec["dnsPolicy"] == "Default"
    assert spec["terminationGracePeriodSeconds"] == 0  # a pointer: 0 is a value
    assert spec["enableServiceLinks"] is False
    assert spec["securityContext"] == {"runAsUser": 1}


def test_container_defaults_apply_to_init_and_ephemeral_containers():
    spec = pod(
        initContainers=[{"name": "i", "image": "init"}],
        ephemeralContainers=[{"name": "e", "image": "dbg:1", "targetContainerName": "c"}],
    )["spec"]
    assert spec["initContainers"][0]["imagePullPolicy"] == "Always"
    eph = spec["ephemeralContainers"][0]
    assert eph["imagePullPolicy"] == "IfNotPresent" and eph["terminationMessagePolicy"] == "File"


def test_ports_probes_and_requests():
    spec = pod(
        containers=[
            {
                "name": "c",
                "image": "x:1",
                "ports": [{"containerPort": 80}, {"containerPort": 53, "protocol": "UDP"}],
                "livenessProbe": {"httpGet": {"port": 80}},
                "readinessProbe": {"tcpSocket": {"port": "http"}, "periodSeconds": 5},
                "startupProbe": {"grpc": {"port": 9000}},
                "lifecycle": {"preStop": {"httpGet": {"port": 8080, "path": "/stop"}}},
                "resources": {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "500m"}},
            }
        ]
    )["spec"]
    c = spec["containers"][0]
    assert [p["protocol"] for p in c["ports"]] == ["TCP", "UDP"]
    assert "hostPort" not in c["ports"][0]
    live = c["livenessProbe"]
    assert (live["timeoutSeconds"], live["periodSeconds"], live["successThreshold"], live["failureThreshold"]) == (
        1,
        10,
        1,
        3,
    )
    assert live["httpGet"] == {"port": 80, "path": "/", "scheme": "HTTP"}
    assert c["readinessProbe"]["periodSeconds"] == 5
    assert c["startupProbe"]["grpc"] == {"port": 9000, "service": ""}
    assert c["lifecycle"]["preStop"]["httpGet"] == {"port": 8080, "path": "/stop", "scheme": "HTTP"}
    assert c["resources"]["requests"] == {"cpu": "500m", "memory": "1Gi"}


def test_host_network_copies_container_ports_to_host_ports():
    spec = pod(
        hostNetwork=True,
        containers=[
            {"name": "c", "image": "x:1", "ports": [{"containerPort": 8080}, {"containerPort": 9, "hostPort": 9}]}
        ],
    )["spec"]
    assert [p["hostPort"] for p in spec["containers"][0]["ports"]] == [8080, 9]


def test_volume_defaults():
    spec = pod(
        volumes=[
            {"name": "empty"},
            {"name": "hp", "hostPath": {"path": "/data"}},
            {"name": "s", "secret": {"secretName": "x"}},
            {"name": "cm", "configMap": {"name": "x", "defaultMode": 256}},
            {"name": "d", "downwardAPI": {"items": [{"path": "n", "fieldRef": {"fieldPath": "metadata.name"}}]}},
            {"name": "p", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}},
            {"name": "e", "ephemeral": {"volumeClaimTemplate": {"spec": {"accessModes": ["ReadWriteOnce"]}}}},
        ]
    )["spec"]
    v = {vol["name"]: vol for vol in spec["volumes"]}
    assert v["empty"]["emptyDir"] == {}
    assert v["hp"]["hostPath"] == {"path": "/data", "type": ""}
    assert v["s"]["secret"]["defaultMode"] == 420
    assert v["cm"]["configMap"]["defaultMode"] == 256
    assert v["d"]["downwardAPI"]["defaultMode"] == 420
    assert v["d"]["downwardAPI"]["items"][0]["fieldRef"]["apiVersion"] == "v1"
    assert v["p"]["projected"]["defaultMode"] == 420
    assert v["p"]["projected"]["sources"][0]["serviceAccountToken"]["expirationSeconds"] == 3600
    assert v["e"]["ephemeral"]["volumeClaimTemplate"]["spec"]["volumeMode"] == "Filesystem"
    assert "emptyDir" not in v["s"]


# --- templates get spec defaults, not Pod-only ones ------------------------------------------


def test_deployment_defaults_and_template():
    d = defaulted(
        "apps",
        "Deployment",
        {
            "spec": {
                "selector": {"matchLabels": {"a": "b"}},
                "template": {
                    "metadata": {"labels": {"a": "b"}},
                    "spec": {"containers": [{"name": "c", "image": "nginx", "resources": {"limits": {"cpu": "1"}}}]},
                },
            }
        },
    )
    spec = d["spec"]
    assert spec["replicas"] == 1
    assert spec["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}}
    assert spec["revisionHistoryLimit"] == 10 and spec["progressDeadlineSeconds"] == 600
    tmpl = spec["template"]["spec"]
    assert tmpl["restartPolicy"] == "Always" and tmpl["terminationGracePeriodSeconds"] == 30
    assert tmpl["containers"][0]["imagePullPolicy"] == "Always"
    assert "enableServiceLinks" not in tmpl  # Pod-only default
    assert "requests" not in tmpl["containers"][0]["resources"]  # Pod-only default


def test_deployment_recreate_strategy_gets_no_rolling_update():
    d = defaulted("apps", "Deployment", {"spec": {"strategy": {"type": "Recreate"}}})
    assert d["spec"]["strategy"] == {"type": "Recreate"}


def test_daemonset_statefulset_replicaset_defaults():
    ds = defaulted("apps", "DaemonSet", {"spec": {}})["spec"]
    assert ds["updateStrategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}}
    assert ds["revisionHistoryLimit"] == 10
    sts = defaulted(
        "apps", "StatefulSet", {"spec": {"volumeClaimTemplates": [{"metadata": {"name": "d"}, "spec": {}}]}}
    )["spec"]
    assert sts["podManagementPolicy"] == "OrderedReady"
    assert sts["updateStrategy"] == {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}
    assert sts["replicas"] == 1 and sts["revisionHistoryLimit"] == 10
    assert sts["volumeClaimTemplates"][0]["status"] == {"phase": "Pending"}
    assert sts["volumeClaimTemplates"][0]["spec"]["volumeMode"] == "Filesystem"
    on_delete = defaulted("apps", "StatefulSet", {"spec": {"updateStrategy": {"type": "OnDelete"}}})["spec"]
    assert on_delete["updateStrategy"] == {"type": "OnDelete"}
    assert defaulted("apps", "ReplicaSet", {"spec": {}})["spec"]["replicas"] == 1


def test_job_and_cronjob_defaults():
    job = defaulted(
        "batch",
        "Job",
        {
            "metadata": {},
            "spec": {
                "template": {
                    "metadata": {"labels": {"j": "1"}},
                    "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x:1"}]},
                },
                "podFailurePolicy": {
                    "rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]
                },
            },
        },
    )
    spec = job["spec"]
    assert (spec["completions"], spec["parallelism"], spec["backoffLimit"]) == (1, 1, 6)
    assert spec["completionMode"] == "NonIndexed" and spec["suspend"] is False
    assert spec["podFailurePolicy"]["rules"][0]["onPodConditions"][0]["status"] == "True"
    assert job["metadata"]["labels"] == {"j": "1"}
    assert spec["template"]["spec"]["restartPolicy"] == "Never"
    parallel = defaulted("batch", "Job", {"spec": {"parallelism": 3}})["spec"]
    assert parallel["parallelism"] == 3 and "completions" not in parallel
    cj = defaulted(
        "batch",
        "CronJob",
        {
            "spec": {
                "schedule": "* * * * *",
                "jobTemplate": {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}}},
            }
        },
    )["spec"]
    assert (cj["concurrencyPolicy"], cj["suspend"], cj["successfulJobsHistoryLimit"], cj["failedJobsHistoryLimit"]) == (
        "Allow",
        False,
        3,
        1,
    )
    job_spec = cj["jobTemplate"]["spec"]
    assert "backoffLimit" not in job_spec  # Job-level defaults stay with Jobs
    assert job_spec["template"]["spec"]["containers"][0]["imagePullPolicy"] == "Always"


# --- services and friends --------------------------------------------------------------------


def test_service_defaults():
    svc = defaulted(
        "",
        "Service",
        {
            "spec": {
                "ports": [{"port": 80}, {"port": 53, "protocol": "UDP", "targetPort": "dns"}],
                "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 5}},
            }
        },
    )["spec"]
    assert svc["type"] == "ClusterIP" and svc["sessionAffinity"] == "None"
    assert "sessionAffinityConfig" not in svc
    assert svc["ports"][0] == {"port": 80, "protocol": "TCP", "targetPort": 80}
    assert svc["ports"][1]["targetPort"] == "dns"
    # ipFamilyPolicy is the Service allocator's to infer (registry/services.py), not a static default.
    assert svc["internalTrafficPolicy"] == "Cluster" and "ipFamilyPolicy" not in svc
    assert "externalTrafficPolicy" not in svc and "allocateLoadBalancerNodePorts" not in svc


def test_service_type_specific_defaults():
    lb = defaulted(
        "",
        "Service",
        {"spec": {"type": "LoadBalancer", "sessionAffinity": "ClientIP", "ports": [{"port": 443, "targetPort": 0}]}},
    )["spec"]
    assert lb["externalTrafficPolicy"] == "Cluster" and lb["allocateLoadBalancerNodePorts"] is True
    assert lb["sessionAffinityConfig"] == {"clientIP": {"timeoutSeconds": 10800}}
    assert lb["ports"][0]["targetPort"] == 443
    ext = defaulted("", "Service", {"spec": {"type": "ExternalName", "externalName": "example.com"}})["spec"]
    assert "internalTrafficPolicy" not in ext and "ipFamilyPolicy" not in ext


def test_endpoints_slices_secrets_nodes():
    ep = defaulted("", "Endpoints", {"subsets": [{"addresses": [{"ip": "10.0.0.1"}], "ports": [{"port": 80}]}]})
    assert ep["subsets"][0]["ports"][0]["protocol"] == "TCP"
    sl = defaulted(
        names.DISCOVERY_GROUP, "EndpointSlice", {"addressType": "IPv4", "endpoints": [], "ports": [{"port": 80}]}
    )
    assert sl["ports"][0]["protocol"] == "TCP"
    assert defaulted("", "Secret", {"data": {}})["type"] == "Opaque"
    assert defaulted("", "Secret", {"type": "orch.io/tls"})["type"] == "orch.io/tls"
    node = defaulted("", "Node", {"status": {"capacity": {"cpu": "4", "pods": "110"}}})
    assert node["status"]["allocatable"] == {"cpu": "4", "pods": "110"}
    assert node["status"]["allocatable"] is not node["status"]["capacity"]
    ns = defaulted("", "Namespace", {"metadata": {"name": "x"}})
    assert ns == {"metadata": {"name": "x"}}  # namespace defaults belong to its strategy


def test_storage_and_quota_defaults():
    pv = defaulted("", "PersistentVolume", {"spec": {"hostPath": {"path": "/x"}}})
    assert pv["spec"]["persistentVolumeReclaimPolicy"] == "Retain" and pv["spec"]["volumeMode"] == "Filesystem"
    assert pv["spec"]["hostPath"]["type"] == "" and pv["status"]["phase"] == "Pending"
    pvc = defaulted("", "PersistentVolumeClaim", {"spec": {}})
    assert pvc["status"]["phase"] == "Pending" and pvc["spec"]["volumeMode"] == "Filesystem"
    lr = defaulted(
        "",
        "LimitRange",
        {
            "spec": {
                "limits": [
                    {"type": "Container", "max": {"cpu": "2"}, "min": {"memory": "1Mi"}},
                    {"type": "Pod", "max": {"cpu": "4"}},
                ]
            }
        },
    )
    container, pod_item = lr["spec"]["limits"]
    assert container["default"] == {"cpu": "2"}
    assert container["defaultRequest"] == {"cpu": "2", "memory": "1Mi"}
    assert "default" not in pod_item
    sc = defaulted(names.STORAGE_GROUP, "StorageClass", {"provisioner": "x"})
    assert sc["reclaimPolicy"] == "Delete" and sc["volumeBindingMode"] == "Immediate"


def test_replication_controller_defaults_from_template():
    rc = defaulted(
        "",
        "ReplicationController",
        {
            "metadata": {},
            "spec": {
                "template": {
                    "metadata": {"labels": {"app": "x"}},
                    "spec": {"containers": [{"name": "c", "image": "x:1"}]},
                }
            },
        },
    )
    assert rc["spec"]["selector"] == {"app": "x"} and rc["metadata"]["labels"] == {"app": "x"}
    assert rc["spec"]["replicas"] == 1
    assert rc["spec"]["template"]["spec"]["dnsPolicy"] == "ClusterFirst"


def test_other_group_defaults():
    np = defaulted(
        names.NETWORKING_GROUP, "NetworkPolicy", {"spec": {"podSelector": {}, "egress": [{"ports": [{"port": 53}]}]}}
    )
    assert np["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert np["spec"]["egress"][0]["ports"][0]["protocol"] == "TCP"
    np2 = defaulted(names.NETWORKING_GROUP, "NetworkPolicy", {"spec": {"podSelector": {}}})
    assert np2["spec"]["policyTypes"] == ["Ingress"]
    ic = defaulted(
        names.NETWORKING_GROUP,
        "IngressClass",
        {"spec": {"controller": "x/y", "parameters": {"kind": "K", "name": "n"}}},
    )
    assert ic["spec"]["parameters"]["scope"] == "Cluster"
    rb = defaulted(
        names.RBAC_GROUP,
        "RoleBinding",
        {
            "roleRef": {"kind": "Role", "name": "r"},
            "subjects": [{"kind": "User", "name": "u"}, {"kind": "ServiceAccount", "name": "sa", "namespace": "d"}],
        },
    )
    assert rb["roleRef"]["apiGroup"] == names.RBAC_GROUP
    assert rb["subjects"][0]["apiGroup"] == names.RBAC_GROUP and "apiGroup" not in rb["subjects"][1]
    pc = defaulted(names.SCHEDULING_GROUP, "PriorityClass", {"value": 10})
    assert pc["preemptionPolicy"] == "PreemptLowerPriority"
    csr = defaulted(
        names.CERTIFICATES_GROUP, "CertificateSigningRequest", {"status": {"conditions": [{"type": "Approved"}]}}
    )
    assert csr["status"]["conditions"][0]["status"] == "True"
    wh = defaulted(
        names.ADMISSIONREGISTRATION_GROUP,
        "MutatingWebhookConfiguration",
        {
            "webhooks": [
                {
                    "name": "w.example",
                    "sideEffects": "None",
                    "admissionReviewVersions": ["v1"],
                    "clientConfig": {"service": {"namespace": "n", "name": "s"}},
                    "rules": [
                        {"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}
                    ],
                }
            ]
        },
    )
    w = wh["webhooks"][0]
    assert (w["failurePolicy"], w["matchPolicy"], w["timeoutSeconds"], w["reinvocationPolicy"]) == (
        "Fail",
        "Equivalent",
        10,
        "Never",
    )
    assert w["namespaceSelector"] == {} and w["objectSelector"] == {}
    assert w["clientConfig"]["service"]["port"] == 443
    assert w["rules"][0]["scope"] == "*"  # Rule is inline in RuleWithOperations
    vw = defaulted(names.ADMISSIONREGISTRATION_GROUP, "ValidatingWebhookConfiguration", {"webhooks": [{"name": "v"}]})
    assert "reinvocationPolicy" not in vw["webhooks"][0] and vw["webhooks"][0]["failurePolicy"] == "Fail"


def test_defaulting_is_idempotent():
    once = pod(volumes=[{"name": "v"}], hostNetwork=True)
    twice = copy.deepcopy(once)
    apply_defaults("", "v1", "Pod", twice)
    assert twice == once


def test_unknown_kinds_and_non_objects_are_left_alone():
    obj = {"spec": {"x": 1}}
    apply_defaults("", "v1", "Nope", obj)
    assert obj == {"spec": {"x": 1}}
    for bad in (None, [], "pod", 3):
        apply_defaults("", "v1", "Pod", bad)


@pytest.mark.parametrize(
    "spec",
    [
        None,
        [],
        "x",
        1,
        {"containers": "nope"},
        {"containers": [None, 1, "c", {"name": "c", "ports": "x", "resources": {"limits": "x"}}]},
        {"containers": [{"name": "c", "resources": {"limits": {"cpu": "1"}, "requests": "x"}}]},
        {
            "containers": [{"name": "c", "livenessProbe": "x", "ports": [None, {"containerPort": "80"}]}],
            "hostNetwork": True,
        },
        {"volumes": [None, {"name": "v", "secret": "x"}, {"name": "w", "hostPath": []}], "securityContext": "x"},
        {"terminationGracePeriodSeconds": "x", "restartPolicy": 3, "enableServiceLinks": "yes"},
    ],
)
def test_malformed_pods_never_raise(spec):
    obj = {"metadata": "x", "spec": spec, "status": 3}
    apply_defaults("", "v1", "Pod", obj)  # must not raise; bad parts are left for validation
    assert obj["metadata"] == "x" and obj["status"] == 3


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 100) | st.text(max_size=5),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(
            st.sampled_from(
                [
                    "spec",
                    "status",
                    "metadata",
                    "containers",
                    "ports",
                    "template",
                    "type",
                    "name",
                    "volumes",
                    "strategy",
                    "updateStrategy",
                    "selector",
                    "limits",
                    "rules",
                    "webhooks",
                    "subsets",
                    "protocol",
                    "port",
                    "targetPort",
                    "resources",
                    "image",
                    "hostNetwork",
                ]
            ),
            children,
            max_size=4,
        )
    ),
    max_leaves=25,
)


@settings(max_examples=200, deadline=None)
@given(
    kind=st.sampled_from(REGISTRY.kinds),
    body=st.dictionaries(
        st.sampled_from(["spec", "status", "metadata", "subsets", "webhooks", "roleRef", "subjects", "data", "type"]),
        json_values,
        max_size=4,
    ),
)
def test_random_bodies_never_raise(kind, body):
    apply_defaults(kind.group, kind.version, kind.kind, body)
