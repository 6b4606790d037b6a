"""Pod validation: field paths, reasons and messages as upstream's (v1.27)."""

from __future__ import annotations

import copy
from typing import Any, Callable

import pytest

from apiserver_min.api import names
from apiserver_min.api.defaults import apply_defaults
from apiserver_min.api.podvalidation import (
    POD_UPDATE_FORBIDDEN_MESSAGE,
    is_env_var_name,
    is_valid_port_name,
    validate_pod,
    validate_pod_spec,
    validate_pod_update,
)
from apiserver_min.api.validation import (
    FIELD_VALUE_DUPLICATE as DUP,
)
from apiserver_min.api.validation import (
    FIELD_VALUE_FORBIDDEN as FORBIDDEN,
)
from apiserver_min.api.validation import (
    FIELD_VALUE_INVALID as INVALID,
)
from apiserver_min.api.validation import (
    FIELD_VALUE_NOT_FOUND as NOT_FOUND,
)
from apiserver_min.api.validation import (
    FIELD_VALUE_NOT_SUPPORTED as NOT_SUPPORTED,
)
from apiserver_min.api.validation import (
    FIELD_VALUE_REQUIRED as REQUIRED,
)
from apiserver_min.api.validation import (
    FIELD_VALUE_TOO_LONG as TOO_LONG,
)
from apiserver_min.api.validation import (
    FIELD_VALUE_TYPE_INVALID as TYPE_INVALID,
)


def full_pod() -> dict:
    """A pod that uses most of what validation looks at; it must be valid."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "web-0.example",
            "namespace": "default",
            "labels": {"app": "web", "example.com/tier": "front"},
            "annotations": {"Example.com/note": "anything goes here"},
        },
        "spec": {
            "volumes": [
                {"name": "scratch", "emptyDir": {"medium": "Memory", "sizeLimit": "64Mi"}},
                {"name": "host", "hostPath": {"path": "/var/log", "type": "Directory"}},
                {
                    "name": "cfg",
                    "configMap": {
                        "name": "cfg",
                        "defaultMode": 0o644,
                        "items": [{"key": "a.conf", "path": "conf/a.conf", "mode": 0o600}],
                    },
                },
                {"name": "sec", "secret": {"secretName": "tls", "items": [{"key": "tls.crt", "path": "tls.crt"}]}},
                {
                    "name": "info",
                    "downwardAPI": {
                        "items": [
                            {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
                            {
                                "path": "cpu",
                                "resourceFieldRef": {"containerName": "web", "resource": "limits.cpu", "divisor": "1m"},
                            },
                        ]
                    },
                },
                {
                    "name": "proj",
                    "projected": {
                        "sources": [
                            {"secret": {"name": "s1", "items": [{"key": "k", "path": "p1"}]}},
                            {"configMap": {"name": "c1", "items": [{"key": "k", "path": "p2"}]}},
                            {"downwardAPI": {"items": [{"path": "p3", "fieldRef": {"fieldPath": "metadata.name"}}]}},
                            {"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}},
                        ]
                    },
                },
                {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
            ],
            "initContainers": [
                {
                    "name": "init",
                    "image": "busybox:1.36",
                    "command": ["sh", "-c", "true"],
                    "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}],
                }
            ],
            "containers": [
                {
                    "name": "web",
                    "image": "nginx:1.25",
                    "imagePullPolicy": "IfNotPresent",
                    "terminationMessagePolicy": "FallbackToLogsOnError",
                    "workingDir": "/srv",
                    "ports": [
                        {"name": "http", "containerPort": 80, "protocol": "TCP"},
                        {"name": "metrics-9090", "containerPort": 9090, "hostPort": 19090, "protocol": "UDP"},
                        {"containerPort": 5000, "protocol": "SCTP"},
                    ],
                    "env": [
                        {"name": "PLAIN", "value": "x"},
                        {"name": "my.env-name", "value": "y"},
                        {
                            "name": "POD_NAME",
                            "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}},
                        },
                        {"name": "POD_IPS", "valueFrom": {"fieldRef": {"fieldPath": "status.podIPs"}}},
                        {
                            "name": "TIER",
                            "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['example.com/tier']"}},
                        },
                        {
                            "name": "MEM",
                            "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}},
                        },
                        {"name": "CM", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "a.conf"}}},
                        {
                            "name": "SEC",
                            "valueFrom": {"secretKeyRef": {"name": "tls", "key": "tls.crt", "optional": True}},
                        },
                    ],
                    "envFrom": [{"prefix": "CFG_", "configMapRef": {"name": "cfg"}}, {"secretRef": {"name": "tls"}}],
                    "resources": {
                        "limits": {"cpu": "500m", "memory": "128Mi", "example.com/gpu": "1", "hugepages-2Mi": "4Mi"},
                        "requests": {"cpu": "250m", "memory": "64Mi", "example.com/gpu": "1", "hugepages-2Mi": "4Mi"},
                    },
                    "volumeMounts": [
                        {"name": "scratch", "mountPath": "/tmp"},
                        {"name": "cfg", "mountPath": "/etc/app", "readOnly": True, "subPath": "conf"},
                        {"name": "host", "mountPath": "/host/log", "mountPropagation": "HostToContainer"},
                        {"name": "info", "mountPath": "/etc/info"},
                        {"name": "proj", "mountPath": "/etc/proj"},
                        {"name": "sec", "mountPath": "/etc/tls", "subPathExpr": "$(POD_NAME)"},
                    ],
                    "volumeDevices": [{"name": "data", "devicePath": "/dev/xvda"}],
                    "livenessProbe": {
                        "httpGet": {
                            "path": "/healthz",
                            "port": "http",
                            "scheme": "HTTPS",
                            "httpHeaders": [{"name": "X-Probe", "value": "1"}],
                        },
                        "initialDelaySeconds": 0,
                        "periodSeconds": 5,
                        "successThreshold": 1,
                        "terminationGracePeriodSeconds": 10,
                    },
                    "readinessProbe": {"tcpSocket": {"port": 80}, "successThreshold": 3, "failureThreshold": 1},
                    "startupProbe": {"grpc": {"port": 9090}, "failureThreshold": 30},
                    "lifecycle": {
                        "postStart": {"exec": {"command": ["true"]}},
                        "preStop": {"httpGet": {"path": "/stop", "port": 80}},
                    },
                    "securityContext": {
                        "runAsUser": 1000,
                        "runAsGroup": 1000,
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"add": ["NET_BIND_SERVICE"]},
                        "seccompProfile": {"type": "Localhost", "localhostProfile": "profiles/a.json"},
                    },
                },
                {
                    "name": "sidecar",
                    "image": "busybox:1.36",
                    "securityContext": {"privileged": True},
                    "volumeMounts": [{"name": "host", "mountPath": "/host", "mountPropagation": "Bidirectional"}],
                },
            ],
            "restartPolicy": "OnFailure",
            "dnsPolicy": "None",
            "dnsConfig": {
                "nameservers": ["10.0.0.10", "fd00::a"],
                "searches": ["svc.cluster.local.", "example.com"],
                "options": [{"name": "ndots", "value": "2"}],
            },
            "terminationGracePeriodSeconds": 0,
            "activeDeadlineSeconds": 3600,
            "hostname": "web-0",
            "subdomain": "web",
            "serviceAccountName": "web",
            "nodeName": "node-1.example",
            "priorityClassName": "high",
            "nodeSelector": {"disk": "ssd", "example.com/zone": "a"},
            "tolerations": [
                {"key": "example.com/dedicated", "operator": "Equal", "value": "web", "effect": "NoSchedule"},
                {
                    "key": "node.orch.io/unreachable",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                },
                {"operator": "Exists"},
            ],
            "hostAliases": [{"ip": "127.0.0.1", "hostnames": ["foo.local"]}],
            "readinessGates": [{"conditionType": "example.com/ready"}],
            "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway"}],
            "securityContext": {
                "runAsUser": 0,
                "runAsGroup": 0,
                "fsGroup": 2000,
                "supplementalGroups": [1, 2],
                "fsGroupChangePolicy": "OnRootMismatch",
                "sysctls": [
                    {"name": "net.ipv4.ip_local_port_range", "value": "1024 65535"},
                    {"name": "kernel.shm_rmid_forced", "value": "1"},
                ],
                "seccompProfile": {"type": "RuntimeDefault"},
            },
        },
    }


def minimal_pod() -> dict:
    return {
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }


def fields(errs) -> list[tuple[str, str]]:
    return [(e.field, e.type) for e in errs]


def test_full_pod_is_valid():
    assert validate_pod(full_pod()) == []


def test_full_pod_is_valid_after_defaulting():
    pod = full_pod()
    apply_defaults("", "v1", "Pod", pod)
    assert validate_pod(pod) == []


def test_minimal_pod_is_valid_before_and_after_defaults():
    pod = minimal_pod()
    assert validate_pod(pod) == []
    apply_defaults("", "v1", "Pod", pod)
    assert pod["spec"]["restartPolicy"] == "Always"
    assert validate_pod(pod) == []


def test_required_image_message_matches_upstream():
    pod = minimal_pod()
    del pod["spec"]["containers"][0]["image"]
    assert [e.message() for e in validate_pod(pod)] == ["spec.containers[0].image: Required value"]


# Each case: (id, mutation of full_pod(), expected field path, expected reason).
def _set(path: str, value: Any) -> Callable[[dict], None]:
    """Set a dotted path ("spec.containers.0.image") in the pod; the value None deletes it."""

    def apply(pod: dict) -> None:
        parts = path.split(".")
        obj: Any = pod
        for p in parts[:-1]:
            obj = obj[int(p)] if isinstance(obj, list) else obj.setdefault(p, {})
        last = parts[-1]
        if isinstance(obj, list):
            obj[int(last)] = value
        elif value is None:
            obj.pop(last, None)
        else:
            obj[last] = value

    return apply


def _append(path: str, value: Any) -> Callable[[dict], None]:
    def apply(pod: dict) -> None:
        obj: Any = pod
        for p in path.split("."):
            obj = obj[int(p)] if isinstance(obj, list) else obj.setdefault(p, [] if p == path.split(".")[-1] else {})
        obj.append(value)

    return apply


C0 = "spec.containers.0"
P0 = "spec.containers[0]"

CASES: list[tuple[str, Callable[[dict], None], str, str]] = [
    # metadata
    ("name missing", _set("metadata.name", None), "metadata.name", REQUIRED),
    ("name not subdomain", _set("metadata.name", "Web_0"), "metadata.name", INVALID),
    ("namespace missing", _set("metadata.namespace", None), "metadata.namespace", REQUIRED),
    ("namespace not label", _set("metadata.namespace", "a.b"), "metadata.namespace", INVALID),
    ("label value", _set("metadata.labels", {"app": "-bad"}), "metadata.labels", INVALID),
    ("label key", _set("metadata.labels", {"a/b/c": "x"}), "metadata.labels", INVALID),
    ("annotation key", _set("metadata.annotations", {"-x": "1"}), "metadata.annotations", INVALID),
    ("annotations too long", _set("metadata.annotations", {"a": "x" * (256 * 1024)}), "metadata.annotations", TOO_LONG),
    (
        "mirror annotation without nodeName",
        lambda p: (
            p["metadata"].setdefault("annotations", {}).update({names.ANNOTATION_CONFIG_MIRROR: "h"}),
            p["spec"].pop("nodeName"),
        ),
        f"metadata.annotations[{names.ANNOTATION_CONFIG_MIRROR}]",
        INVALID,
    ),
    # containers
    ("containers missing", _set("spec.containers", None), "spec.containers", REQUIRED),
    ("containers empty", _set("spec.containers", []), "spec.containers", REQUIRED),
    ("container not object", _set(f"{C0}", "web"), P0, TYPE_INVALID),
    ("container name missing", _set(f"{C0}.name", None), f"{P0}.name", REQUIRED),
    ("container name not label", _set(f"{C0}.name", "Web"), f"{P0}.name", INVALID),
    ("container name duplicate", _set("spec.containers.1.name", "web"), "spec.containers[1].name", DUP),
    ("init name clashes with container", _set("spec.initContainers.0.name", "web"), "spec.initContainers[0].name", DUP),
    ("image missing", _set(f"{C0}.image", None), f"{P0}.image", REQUIRED),
    ("image whitespace", _set(f"{C0}.image", " nginx"), f"{P0}.image", INVALID),
    ("pull policy", _set(f"{C0}.imagePullPolicy", "Sometimes"), f"{P0}.imagePullPolicy", NOT_SUPPORTED),
    (
        "termination message policy",
        _set(f"{C0}.terminationMessagePolicy", "Log"),
        f"{P0}.terminationMessagePolicy",
        NOT_SUPPORTED,
    ),
    ("workingDir type", _set(f"{C0}.workingDir", 5), f"{P0}.workingDir", TYPE_INVALID),
    # ports
    ("containerPort missing", _set(f"{C0}.ports.0.containerPort", None), f"{P0}.ports[0].containerPort", REQUIRED),
    ("containerPort too big", _set(f"{C0}.ports.0.containerPort", 65536), f"{P0}.ports[0].containerPort", INVALID),
    ("containerPort negative", _set(f"{C0}.ports.0.containerPort", -1), f"{P0}.ports[0].containerPort", INVALID),
    ("hostPort too big", _set(f"{C0}.ports.1.hostPort", 70000), f"{P0}.ports[1].hostPort", INVALID),
    ("protocol", _set(f"{C0}.ports.0.protocol", "ICMP"), f"{P0}.ports[0].protocol", NOT_SUPPORTED),
    ("port name too long", _set(f"{C0}.ports.0.name", "a" * 16), f"{P0}.ports[0].name", INVALID),
    ("port name upper", _set(f"{C0}.ports.0.name", "HTTP"), f"{P0}.ports[0].name", INVALID),
    ("port name digits only", _set(f"{C0}.ports.0.name", "8080"), f"{P0}.ports[0].name", INVALID),
    ("port name double hyphen", _set(f"{C0}.ports.0.name", "a--b"), f"{P0}.ports[0].name", INVALID),
    ("port name duplicate", _set(f"{C0}.ports.1.name", "http"), f"{P0}.ports[1].name", DUP),
    (
        "host port conflict",
        _set("spec.containers.1.ports", [{"containerPort": 1, "hostPort": 19090, "protocol": "UDP"}]),
        "spec.containers[1].ports[0].hostPort",
        DUP,
    ),
    # env
    ("env name missing", _set(f"{C0}.env.0.name", None), f"{P0}.env[0].name", REQUIRED),
    ("env name digit", _set(f"{C0}.env.0.name", "1ABC"), f"{P0}.env[0].name", INVALID),
    ("env name dotdot", _set(f"{C0}.env.0.name", "..x"), f"{P0}.env[0].name", INVALID),
    ("env value and valueFrom", _set(f"{C0}.env.2.value", "x"), f"{P0}.env[2].valueFrom", INVALID),
    ("env empty valueFrom", _set(f"{C0}.env.2.valueFrom", {}), f"{P0}.env[2].valueFrom", INVALID),
    (
        "env two sources",
        _set(f"{C0}.env.2.valueFrom.secretKeyRef", {"name": "a", "key": "b"}),
        f"{P0}.env[2].valueFrom",
        INVALID,
    ),
    (
        "fieldRef unsupported",
        _set(f"{C0}.env.2.valueFrom.fieldRef.fieldPath", "metadata.labels"),
        f"{P0}.env[2].valueFrom.fieldRef.fieldPath",
        NOT_SUPPORTED,
    ),
    (
        "fieldRef unknown",
        _set(f"{C0}.env.2.valueFrom.fieldRef.fieldPath", "spec.foo"),
        f"{P0}.env[2].valueFrom.fieldRef.fieldPath",
        INVALID,
    ),
    (
        "fieldRef bad subscript",
        _set(f"{C0}.env.2.valueFrom.fieldRef.fieldPath", "metadata.name['x']"),
        f"{P0}.env[2].valueFrom.fieldRef.fieldPath",
        INVALID,
    ),
    (
        "fieldRef bad label key",
        _set(f"{C0}.env.2.valueFrom.fieldRef.fieldPath", "metadata.labels['-x']"),
        f"{P0}.env[2].valueFrom.fieldRef",
        INVALID,
    ),
    (
        "fieldRef version",
        _set(f"{C0}.env.2.valueFrom.fieldRef.apiVersion", "v2"),
        f"{P0}.env[2].valueFrom.fieldRef.fieldPath",
        INVALID,
    ),
    (
        "resourceFieldRef resource",
        _set(f"{C0}.env.5.valueFrom.resourceFieldRef.resource", "limits.gpu"),
        f"{P0}.env[5].valueFrom.resourceFieldRef.resource",
        NOT_SUPPORTED,
    ),
    (
        "resourceFieldRef missing resource",
        _set(f"{C0}.env.5.valueFrom.resourceFieldRef.resource", None),
        f"{P0}.env[5].valueFrom.resourceFieldRef.resource",
        REQUIRED,
    ),
    (
        "resourceFieldRef divisor",
        _set(f"{C0}.env.5.valueFrom.resourceFieldRef.divisor", "3"),
        f"{P0}.env[5].valueFrom.resourceFieldRef.divisor",
        INVALID,
    ),
    (
        "configMapKeyRef key missing",
        _set(f"{C0}.env.6.valueFrom.configMapKeyRef.key", None),
        f"{P0}.env[6].valueFrom.configMapKeyRef.key",
        REQUIRED,
    ),
    (
        "configMapKeyRef bad key",
        _set(f"{C0}.env.6.valueFrom.configMapKeyRef.key", "a/b"),
        f"{P0}.env[6].valueFrom.configMapKeyRef.key",
        INVALID,
    ),
    (
        "secretKeyRef bad name",
        _set(f"{C0}.env.7.valueFrom.secretKeyRef.name", "Bad"),
        f"{P0}.env[7].valueFrom.secretKeyRef.name",
        INVALID,
    ),
    ("envFrom prefix", _set(f"{C0}.envFrom.0.prefix", "1X"), f"{P0}.envFrom[0].prefix", INVALID),
    ("envFrom no source", _set(f"{C0}.envFrom.0.configMapRef", None), f"{P0}.envFrom", INVALID),
    ("envFrom two sources", _set(f"{C0}.envFrom.0.secretRef", {"name": "x"}), f"{P0}.envFrom", INVALID),
    ("envFrom name missing", _set(f"{C0}.envFrom.0.configMapRef", {}), f"{P0}.envFrom[0].configMapRef.name", REQUIRED),
    # resources
    ("bad quantity", _set(f"{C0}.resources.limits.cpu", "lots"), f"{P0}.resources.limits[cpu]", INVALID),
    ("negative quantity", _set(f"{C0}.resources.requests.memory", "-1"), f"{P0}.resources.requests[memory]", INVALID),
    ("request above limit", _set(f"{C0}.resources.requests.cpu", "1"), f"{P0}.resources.requests", INVALID),
    ("unknown resource", _set(f"{C0}.resources.limits.gpu", "1"), f"{P0}.resources.limits[gpu]", INVALID),
    ("non-container resource", _set(f"{C0}.resources.limits.pods", "1"), f"{P0}.resources.limits[pods]", INVALID),
    (
        "extended not integer",
        lambda p: (
            p["spec"]["containers"][0]["resources"]["limits"].update({"example.com/gpu": "500m"}),
            p["spec"]["containers"][0]["resources"]["requests"].update({"example.com/gpu": "500m"}),
        ),
        f"{P0}.resources.limits[example.com/gpu]",
        INVALID,
    ),
    (
        "extended request != limit",
        lambda p: p["spec"]["containers"][0]["resources"]["requests"].update({"example.com/gpu": "2"}),
        f"{P0}.resources.requests",
        INVALID,
    ),
    (
        "extended request without limit",
        _set("spec.containers.1.resources", {"requests": {"example.com/gpu": "1"}}),
        "spec.containers[1].resources.limits",
        REQUIRED,
    ),
    (
        "hugepages not multiple",
        lambda p: (
            p["spec"]["containers"][0]["resources"]["limits"].update({"hugepages-2Mi": "3Mi"}),
            p["spec"]["containers"][0]["resources"]["requests"].update({"hugepages-2Mi": "3Mi"}),
        ),
        f"{P0}.resources.limits[hugepages-2Mi]",
        INVALID,
    ),
    (
        "hugepages without cpu/memory",
        _set("spec.containers.1.resources", {"limits": {"hugepages-2Mi": "2Mi"}}),
        "spec.containers[1].resources",
        FORBIDDEN,
    ),
    # volume mounts and devices
    ("mount unknown volume", _set(f"{C0}.volumeMounts.0.name", "nope"), f"{P0}.volumeMounts[0].name", NOT_FOUND),
    ("mount name missing", _set(f"{C0}.volumeMounts.0.name", None), f"{P0}.volumeMounts[0].name", REQUIRED),
    ("mountPath missing", _set(f"{C0}.volumeMounts.0.mountPath", None), f"{P0}.volumeMounts[0].mountPath", REQUIRED),
    ("mountPath duplicate", _set(f"{C0}.volumeMounts.1.mountPath", "/tmp"), f"{P0}.volumeMounts[1].mountPath", INVALID),
    ("subPath absolute", _set(f"{C0}.volumeMounts.1.subPath", "/etc"), f"{P0}.volumeMounts.subPath", INVALID),
    ("subPath backstep", _set(f"{C0}.volumeMounts.1.subPath", "a/../../b"), f"{P0}.volumeMounts.subPath", INVALID),
    ("subPath and expr", _set(f"{C0}.volumeMounts.5.subPath", "x"), f"{P0}.volumeMounts[5].subPathExpr", INVALID),
    (
        "propagation unknown",
        _set(f"{C0}.volumeMounts.2.mountPropagation", "Shared"),
        f"{P0}.volumeMounts.mountPropagation",
        NOT_SUPPORTED,
    ),
    (
        "bidirectional unprivileged",
        _set(f"{C0}.volumeMounts.2.mountPropagation", "Bidirectional"),
        f"{P0}.volumeMounts.mountPropagation",
        FORBIDDEN,
    ),
    ("device on non-pvc", _set(f"{C0}.volumeDevices.0.name", "scratch"), f"{P0}.volumeDevices[0].name", INVALID),
    ("device unknown", _set(f"{C0}.volumeDevices.0.name", "nope"), f"{P0}.volumeDevices[0].name", NOT_FOUND),
    (
        "device path missing",
        _set(f"{C0}.volumeDevices.0.devicePath", None),
        f"{P0}.volumeDevices[0].devicePath",
        REQUIRED,
    ),
    # probes and lifecycle
    ("probe no handler", _set(f"{C0}.livenessProbe.httpGet", None), f"{P0}.livenessProbe", REQUIRED),
    (
        "probe two handlers",
        _set(f"{C0}.livenessProbe.tcpSocket", {"port": 80}),
        f"{P0}.livenessProbe.tcpSocket",
        FORBIDDEN,
    ),
    (
        "probe negative delay",
        _set(f"{C0}.livenessProbe.initialDelaySeconds", -1),
        f"{P0}.livenessProbe.initialDelaySeconds",
        INVALID,
    ),
    (
        "probe negative period",
        _set(f"{C0}.readinessProbe.periodSeconds", -5),
        f"{P0}.readinessProbe.periodSeconds",
        INVALID,
    ),
    (
        "liveness successThreshold",
        _set(f"{C0}.livenessProbe.successThreshold", 2),
        f"{P0}.livenessProbe.successThreshold",
        INVALID,
    ),
    (
        "startup successThreshold",
        _set(f"{C0}.startupProbe.successThreshold", 3),
        f"{P0}.startupProbe.successThreshold",
        INVALID,
    ),
    (
        "probe tgps zero",
        _set(f"{C0}.livenessProbe.terminationGracePeriodSeconds", 0),
        f"{P0}.livenessProbe.terminationGracePeriodSeconds",
        INVALID,
    ),
    (
        "readiness tgps",
        _set(f"{C0}.readinessProbe.terminationGracePeriodSeconds", 5),
        f"{P0}.readinessProbe.terminationGracePeriodSeconds",
        INVALID,
    ),
    (
        "httpGet bad port number",
        _set(f"{C0}.livenessProbe.httpGet.port", 0),
        f"{P0}.livenessProbe.httpGet.port",
        INVALID,
    ),
    (
        "httpGet bad port name",
        _set(f"{C0}.livenessProbe.httpGet.port", "Http"),
        f"{P0}.livenessProbe.httpGet.port",
        INVALID,
    ),
    (
        "httpGet scheme",
        _set(f"{C0}.livenessProbe.httpGet.scheme", "FTP"),
        f"{P0}.livenessProbe.httpGet.scheme",
        NOT_SUPPORTED,
    ),
    (
        "httpGet header",
        _set(f"{C0}.livenessProbe.httpGet.httpHeaders.0.name", "X Probe"),
        f"{P0}.livenessProbe.httpGet.httpHeaders",
        INVALID,
    ),
    (
        "tcpSocket port",
        _set(f"{C0}.readinessProbe.tcpSocket.port", 99999),
        f"{P0}.readinessProbe.tcpSocket.port",
        INVALID,
    ),
    ("grpc port", _set(f"{C0}.startupProbe.grpc.port", 0), f"{P0}.startupProbe.grpc.port", INVALID),
    (
        "exec without command",
        _set(f"{C0}.lifecycle.postStart.exec.command", []),
        f"{P0}.lifecycle.postStart.exec.command",
        REQUIRED,
    ),
    ("lifecycle no handler", _set(f"{C0}.lifecycle.preStop", {}), f"{P0}.lifecycle.preStop", REQUIRED),
    (
        "lifecycle grpc not allowed",
        _set(f"{C0}.lifecycle.preStop", {"grpc": {"port": 1}}),
        f"{P0}.lifecycle.preStop",
        REQUIRED,
    ),
    (
        "lifecycle two handlers",
        _set(f"{C0}.lifecycle.preStop.sleep", {"seconds": 1}),
        f"{P0}.lifecycle.preStop.sleep",
        FORBIDDEN,
    ),
    (
        "sleep zero",
        _set(f"{C0}.lifecycle.preStop", {"sleep": {"seconds": 0}}),
        f"{P0}.lifecycle.preStop.sleep.seconds",
        INVALID,
    ),
    (
        "init lifecycle",
        _set("spec.initContainers.0.lifecycle", {"preStop": {"exec": {"command": ["x"]}}}),
        "spec.initContainers[0].lifecycle",
        FORBIDDEN,
    ),
    (
        "init liveness",
        _set("spec.initContainers.0.livenessProbe", {"exec": {"command": ["x"]}}),
        "spec.initContainers[0].livenessProbe",
        FORBIDDEN,
    ),
    (
        "init readiness",
        _set("spec.initContainers.0.readinessProbe", {"exec": {"command": ["x"]}}),
        "spec.initContainers[0].readinessProbe",
        FORBIDDEN,
    ),
    (
        "init startup",
        _set("spec.initContainers.0.startupProbe", {"exec": {"command": ["x"]}}),
        "spec.initContainers[0].startupProbe",
        FORBIDDEN,
    ),
    # container security context
    (
        "no escalation but privileged",
        _set("spec.containers.1.securityContext.allowPrivilegeEscalation", False),
        "spec.containers[1].securityContext",
        INVALID,
    ),
    (
        "no escalation with SYS_ADMIN",
        _set(f"{C0}.securityContext.capabilities.add", ["CAP_SYS_ADMIN"]),
        f"{P0}.securityContext",
        INVALID,
    ),
    (
        "container runAsUser negative",
        _set(f"{C0}.securityContext.runAsUser", -1),
        f"{P0}.securityContext.runAsUser",
        INVALID,
    ),
    (
        "container runAsGroup huge",
        _set(f"{C0}.securityContext.runAsGroup", 2**31),
        f"{P0}.securityContext.runAsGroup",
        INVALID,
    ),
    ("procMount", _set(f"{C0}.securityContext.procMount", "Masked"), f"{P0}.securityContext.procMount", NOT_SUPPORTED),
    (
        "localhost seccomp without profile",
        _set(f"{C0}.securityContext.seccompProfile.localhostProfile", None),
        f"{P0}.securityContext.seccompProfile.localhostProfile",
        REQUIRED,
    ),
    (
        "seccomp profile with RuntimeDefault",
        _set(f"{C0}.securityContext.seccompProfile.type", "RuntimeDefault"),
        f"{P0}.securityContext.seccompProfile.localhostProfile",
        INVALID,
    ),
    (
        "seccomp type",
        _set("spec.securityContext.seccompProfile.type", "Strict"),
        "spec.securityContext.seccompProfile.type",
        NOT_SUPPORTED,
    ),
    (
        "seccomp type empty",
        _set("spec.securityContext.seccompProfile", {}),
        "spec.securityContext.seccompProfile.type",
        REQUIRED,
    ),
    # volumes
    ("volume name missing", _set("spec.volumes.0.name", None), "spec.volumes[0].name", REQUIRED),
    ("volume name not label", _set("spec.volumes.0.name", "Scratch"), "spec.volumes[0].name", INVALID),
    ("volume duplicate", _set("spec.volumes.1.name", "scratch"), "spec.volumes[1].name", DUP),
    ("volume no source", _set("spec.volumes.0.emptyDir", None), "spec.volumes[0]", REQUIRED),
    ("volume two sources", _set("spec.volumes.0.hostPath", {"path": "/x"}), "spec.volumes[0].hostPath", FORBIDDEN),
    (
        "emptyDir medium",
        _set("spec.volumes.0.emptyDir.medium", "Disk"),
        "spec.volumes[0].emptyDir.medium",
        NOT_SUPPORTED,
    ),
    (
        "emptyDir sizeLimit bad",
        _set("spec.volumes.0.emptyDir.sizeLimit", "big"),
        "spec.volumes[0].emptyDir.sizeLimit",
        INVALID,
    ),
    (
        "emptyDir sizeLimit negative",
        _set("spec.volumes.0.emptyDir.sizeLimit", "-1Mi"),
        "spec.volumes[0].emptyDir.sizeLimit",
        FORBIDDEN,
    ),
    ("hostPath path missing", _set("spec.volumes.1.hostPath.path", None), "spec.volumes[1].hostPath.path", REQUIRED),
    (
        "hostPath backstep",
        _set("spec.volumes.1.hostPath.path", "/var/../etc"),
        "spec.volumes[1].hostPath.path",
        INVALID,
    ),
    ("hostPath type", _set("spec.volumes.1.hostPath.type", "Dir"), "spec.volumes[1].hostPath.type", NOT_SUPPORTED),
    ("configMap name missing", _set("spec.volumes.2.configMap.name", None), "spec.volumes[2].configMap.name", REQUIRED),
    (
        "configMap defaultMode",
        _set("spec.volumes.2.configMap.defaultMode", 0o1000),
        "spec.volumes[2].configMap.defaultMode",
        INVALID,
    ),
    (
        "configMap item absolute",
        _set("spec.volumes.2.configMap.items.0.path", "/abs"),
        "spec.volumes[2].configMap.items[0].path",
        INVALID,
    ),
    (
        "configMap item dotdot",
        _set("spec.volumes.2.configMap.items.0.path", "..data"),
        "spec.volumes[2].configMap.items[0].path",
        INVALID,
    ),
    (
        "configMap item key",
        _set("spec.volumes.2.configMap.items.0.key", None),
        "spec.volumes[2].configMap.items[0].key",
        REQUIRED,
    ),
    (
        "configMap item mode",
        _set("spec.volumes.2.configMap.items.0.mode", -1),
        "spec.volumes[2].configMap.items[0].mode",
        INVALID,
    ),
    (
        "secret name missing",
        _set("spec.volumes.3.secret.secretName", None),
        "spec.volumes[3].secret.secretName",
        REQUIRED,
    ),
    (
        "secret item backstep",
        _set("spec.volumes.3.secret.items.0.path", "a/../../x"),
        "spec.volumes[3].secret.items[0].path",
        INVALID,
    ),
    (
        "downwardAPI path backstep",
        _set("spec.volumes.4.downwardAPI.items.0.path", "../x"),
        "spec.volumes[4].downwardAPI.path",
        INVALID,
    ),
    (
        "downwardAPI no ref",
        _set("spec.volumes.4.downwardAPI.items.0.fieldRef", None),
        "spec.volumes[4].downwardAPI",
        REQUIRED,
    ),
    (
        "downwardAPI both refs",
        _set("spec.volumes.4.downwardAPI.items.0.resourceFieldRef", {"containerName": "web", "resource": "limits.cpu"}),
        "spec.volumes[4].downwardAPI",
        INVALID,
    ),
    (
        "downwardAPI field unsupported",
        _set("spec.volumes.4.downwardAPI.items.0.fieldRef.fieldPath", "spec.nodeName"),
        "spec.volumes[4].downwardAPI.fieldRef.fieldPath",
        NOT_SUPPORTED,
    ),
    (
        "downwardAPI container missing",
        _set("spec.volumes.4.downwardAPI.items.1.resourceFieldRef.containerName", None),
        "spec.volumes[4].downwardAPI.resourceFieldRef.containerName",
        REQUIRED,
    ),
    (
        "projected duplicate path",
        _set("spec.volumes.5.projected.sources.1.configMap.items.0.path", "p1"),
        "spec.volumes[5].projected",
        INVALID,
    ),
    (
        "projected two kinds",
        _set("spec.volumes.5.projected.sources.0.configMap", {"name": "x"}),
        "spec.volumes[5].projected.sources[0]",
        FORBIDDEN,
    ),
    (
        "projected token short",
        _set("spec.volumes.5.projected.sources.3.serviceAccountToken.expirationSeconds", 60),
        "spec.volumes[5].projected.sources[3].serviceAccountToken.expirationSeconds",
        INVALID,
    ),
    (
        "projected token without sa",
        _set("spec.serviceAccountName", None),
        "spec.volumes[5].projected.sources[3].serviceAccountToken",
        FORBIDDEN,
    ),
    (
        "pvc claimName",
        _set("spec.volumes.6.persistentVolumeClaim.claimName", ""),
        "spec.volumes[6].persistentVolumeClaim.claimName",
        REQUIRED,
    ),
    # pod-level fields
    ("restartPolicy", _set("spec.restartPolicy", "Sometimes"), "spec.restartPolicy", NOT_SUPPORTED),
    ("dnsPolicy", _set("spec.dnsPolicy", "Cluster"), "spec.dnsPolicy", NOT_SUPPORTED),
    ("dnsPolicy None without config", _set("spec.dnsConfig", None), "spec.dnsConfig", REQUIRED),
    (
        "dnsPolicy None without nameservers",
        _set("spec.dnsConfig.nameservers", []),
        "spec.dnsConfig.nameservers",
        REQUIRED,
    ),
    (
        "too many nameservers",
        _set("spec.dnsConfig.nameservers", ["1.1.1.1", "1.0.0.1", "8.8.8.8", "8.8.4.4"]),
        "spec.dnsConfig.nameservers",
        INVALID,
    ),
    (
        "bad nameserver",
        _set("spec.dnsConfig.nameservers", ["1.1.1.1", "dns.example"]),
        "spec.dnsConfig.nameservers[1]",
        INVALID,
    ),
    (
        "too many searches",
        _set("spec.dnsConfig.searches", [f"s{i}.example" for i in range(33)]),
        "spec.dnsConfig.searches",
        INVALID,
    ),
    ("bad search", _set("spec.dnsConfig.searches", ["Bad_Domain"]), "spec.dnsConfig.searches[0]", INVALID),
    ("empty option name", _set("spec.dnsConfig.options", [{"value": "1"}]), "spec.dnsConfig.options[0]", REQUIRED),
    ("negative grace", _set("spec.terminationGracePeriodSeconds", -1), "spec.terminationGracePeriodSeconds", INVALID),
    ("active deadline zero", _set("spec.activeDeadlineSeconds", 0), "spec.activeDeadlineSeconds", INVALID),
    ("active deadline type", _set("spec.activeDeadlineSeconds", "60"), "spec.activeDeadlineSeconds", TYPE_INVALID),
    ("hostname", _set("spec.hostname", "web.0"), "spec.hostname", INVALID),
    ("subdomain", _set("spec.subdomain", "Web"), "spec.subdomain", INVALID),
    ("nodeName", _set("spec.nodeName", "Node_1"), "spec.nodeName", INVALID),
    ("serviceAccountName", _set("spec.serviceAccountName", "-sa"), "spec.serviceAccountName", INVALID),
    ("nodeSelector key", _set("spec.nodeSelector", {"bad key": "x"}), "spec.nodeSelector", INVALID),
    ("nodeSelector value", _set("spec.nodeSelector", {"k": "bad value"}), "spec.nodeSelector", INVALID),
    ("hostAlias ip", _set("spec.hostAliases.0.ip", "localhost"), "spec.hostAliases.ip", INVALID),
    (
        "readiness gate",
        _set("spec.readinessGates.0.conditionType", "bad/type/x"),
        "spec.readinessGates[0].conditionType",
        INVALID,
    ),
    (
        "spread skew",
        _set("spec.topologySpreadConstraints.0.maxSkew", 0),
        "spec.topologySpreadConstraints[0].maxSkew",
        INVALID,
    ),
    (
        "spread when",
        _set("spec.topologySpreadConstraints.0.whenUnsatisfiable", "Maybe"),
        "spec.topologySpreadConstraints[0].whenUnsatisfiable",
        NOT_SUPPORTED,
    ),
    ("preemptionPolicy", _set("spec.preemptionPolicy", "Always"), "spec.preemptionPolicy", NOT_SUPPORTED),
    # tolerations
    ("toleration operator", _set("spec.tolerations.0.operator", "In"), "spec.tolerations[0].operator", NOT_SUPPORTED),
    ("toleration exists with value", _set("spec.tolerations.1.value", "x"), "spec.tolerations[1].operator", INVALID),
    (
        "toleration empty key with Equal",
        _set("spec.tolerations.2.operator", "Equal"),
        "spec.tolerations[2].operator",
        INVALID,
    ),
    ("toleration effect", _set("spec.tolerations.0.effect", "NoRun"), "spec.tolerations[0].effect", NOT_SUPPORTED),
    (
        "toleration seconds without NoExecute",
        _set("spec.tolerations.0.tolerationSeconds", 5),
        "spec.tolerations[0].effect",
        INVALID,
    ),
    ("toleration key", _set("spec.tolerations.0.key", "bad key"), "spec.tolerations[0].key", INVALID),
    ("toleration value", _set("spec.tolerations.0.value", "bad value"), "spec.tolerations[0].operator", INVALID),
    # host network and pod security context
    ("hostNetwork port mismatch", _set("spec.hostNetwork", True), f"{P0}.ports[1].containerPort", INVALID),
    (
        "sysctl name",
        _set("spec.securityContext.sysctls.0.name", "Net.IPv4"),
        "spec.securityContext.sysctls[0].name",
        INVALID,
    ),
    (
        "sysctl empty name",
        _set("spec.securityContext.sysctls.0.name", ""),
        "spec.securityContext.sysctls[0].name",
        REQUIRED,
    ),
    (
        "sysctl duplicate",
        _set("spec.securityContext.sysctls.1.name", "net.ipv4.ip_local_port_range"),
        "spec.securityContext.sysctls[1].name",
        DUP,
    ),
    ("sysctl ipc with hostIPC", _set("spec.hostIPC", True), "spec.securityContext.sysctls[1].name", INVALID),
    ("runAsUser negative", _set("spec.securityContext.runAsUser", -1), "spec.securityContext.runAsUser", INVALID),
    ("runAsGroup negative", _set("spec.securityContext.runAsGroup", -1), "spec.securityContext.runAsGroup", INVALID),
    ("fsGroup negative", _set("spec.securityContext.fsGroup", -2), "spec.securityContext.fsGroup", INVALID),
    (
        "supplementalGroups",
        _set("spec.securityContext.supplementalGroups", [1, -1]),
        "spec.securityContext.supplementalGroups[1]",
        INVALID,
    ),
    (
        "fsGroupChangePolicy",
        _set("spec.securityContext.fsGroupChangePolicy", "Never"),
        "spec.securityContext.fsGroupChangePolicy",
        NOT_SUPPORTED,
    ),
    (
        "share pid with hostPID",
        lambda p: (
            p["spec"].update({"hostPID": True}),
            p["spec"]["securityContext"].update({"shareProcessNamespace": True}),
        ),
        "spec.securityContext.shareProcessNamespace",
        INVALID,
    ),
    # ephemeral containers
    (
        "ephemeral on create",
        _set("spec.ephemeralContainers", [{"name": "dbg", "image": "busybox"}]),
        "spec.ephemeralContainers",
        FORBIDDEN,
    ),
    (
        "ephemeral ports",
        _set("spec.ephemeralContainers", [{"name": "dbg", "image": "busybox", "ports": [{"containerPort": 1}]}]),
        "spec.ephemeralContainers[0].ports",
        FORBIDDEN,
    ),
    (
        "ephemeral name clash",
        _set("spec.ephemeralContainers", [{"name": "init", "image": "busybox"}]),
        "spec.ephemeralContainers[0].name",
        DUP,
    ),
    (
        "ephemeral target",
        _set("spec.ephemeralContainers", [{"name": "dbg", "image": "b", "targetContainerName": "zz"}]),
        "spec.ephemeralContainers[0].targetContainerName",
        NOT_FOUND,
    ),
    # wrong types do not crash
    ("env not list", _set(f"{C0}.env", {"A": "1"}), f"{P0}.env", TYPE_INVALID),
    ("port not object", _set(f"{C0}.ports", [80]), f"{P0}.ports[0]", TYPE_INVALID),
    ("spec not object", _set("spec", "x"), "spec", REQUIRED),
]


@pytest.mark.parametrize("mutate,field,reason", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_invalid_pod(mutate, field, reason):
    pod = full_pod()
    mutate(pod)
    errs = validate_pod(pod)
    assert (field, reason) in fields(errs), [e.message() for e in errs]


def test_case_ids_are_unique():
    ids = [c[0] for c in CASES]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("explicit", ["restartPolicy", "dnsPolicy"])
def test_defaultable_pod_fields_may_be_absent(explicit):
    pod = minimal_pod()
    pod["spec"][explicit] = ""
    assert validate_pod(pod) == []


def test_hostnetwork_unset_hostport_is_accepted_and_defaulted():
    pod = minimal_pod()
    pod["spec"]["hostNetwork"] = True
    pod["spec"]["containers"][0]["ports"] = [{"containerPort": 8080}]
    assert validate_pod(pod) == []
    apply_defaults("", "v1", "Pod", pod)
    assert pod["spec"]["containers"][0]["ports"][0]["hostPort"] == 8080
    assert validate_pod(pod) == []


# --- messages ---------------------------------------------------------------------------


def _messages(pod: dict) -> list[str]:
    return [e.message() for e in validate_pod(pod)]


def test_messages_in_upstream_wording():
    pod = minimal_pod()
    c = pod["spec"]["containers"][0]
    c["imagePullPolicy"] = "Sometimes"
    c["ports"] = [{"containerPort": 70000, "protocol": "ICMP"}]
    c["env"] = [{"name": "1X", "value": "v"}]
    pod["spec"]["restartPolicy"] = "Sometimes"
    msgs = _messages(pod)
    assert (
        'spec.containers[0].imagePullPolicy: Unsupported value: "Sometimes": supported values: '
        '"Always", "IfNotPresent", "Never"' in msgs
    )
    assert (
        "spec.containers[0].ports[0].containerPort: Invalid value: 70000: must be between 1 and 65535, inclusive"
        in msgs
    )
    assert (
        'spec.containers[0].ports[0].protocol: Unsupported value: "ICMP": supported values: "SCTP", "TCP", "UDP"'
        in msgs
    )
    assert (
        'spec.containers[0].env[0].name: Invalid value: "1X": a valid environment variable name must consist of '
        "alphabetic characters, digits, '_', '-', or '.', and must not start with a digit (e.g. 'my.env-name',  "
        "or 'MY_ENV.NAME',  or 'MyEnvName1', regex used for validation is '[-._a-zA-Z][-._a-zA-Z0-9]*')"
    ) in msgs
    assert (
        'spec.restartPolicy: Unsupported value: "Sometimes": supported values: "Always", "OnFailure", "Never"' in msgs
    )


def test_probe_and_handler_messages():
    pod = minimal_pod()
    c = pod["spec"]["containers"][0]
    c["livenessProbe"] = {"successThreshold": 2}
    msgs = _messages(pod)
    assert "spec.containers[0].livenessProbe: Required value: must specify a handler type" in msgs
    assert "spec.containers[0].livenessProbe.successThreshold: Invalid value: 2: must be 1" in msgs


def test_init_container_probe_message():
    pod = minimal_pod()
    pod["spec"]["initContainers"] = [{"name": "i", "image": "b", "readinessProbe": {"exec": {"command": ["x"]}}}]
    assert _messages(pod) == ["spec.initContainers[0].readinessProbe: Forbidden: may not be set for init containers"]


def test_volume_mount_not_found_message():
    pod = minimal_pod()
    pod["spec"]["containers"][0]["volumeMounts"] = [{"name": "v", "mountPath": "/v"}]
    assert _messages(pod) == ['spec.containers[0].volumeMounts[0].name: Not found: "v"']


def test_escalation_message():
    pod = minimal_pod()
    pod["spec"]["containers"][0]["securityContext"] = {"privileged": True, "allowPrivilegeEscalation": False}
    (err,) = validate_pod(pod)
    assert err.field == "spec.containers[0].securityContext"
    assert err.detail == "cannot set `allowPrivilegeEscalation` to false and `privileged` to true"


def test_sysctl_message_names_regex():
    pod = minimal_pod()
    pod["spec"]["securityContext"] = {"sysctls": [{"name": "bad name", "value": "1"}]}
    (err,) = validate_pod(pod)
    assert err.detail == (
        "must have at most 253 characters and match regex "
        "^([a-z0-9]([-_a-z0-9]*[a-z0-9])?[\\./])*[a-z0-9]([-_a-z0-9]*[a-z0-9])?$"
    )


def test_sysctl_with_slashes_and_net_namespace_on_host_network():
    pod = minimal_pod()
    pod["spec"]["hostNetwork"] = True
    pod["spec"]["securityContext"] = {
        "sysctls": [{"name": "net/ipv4/ip_forward", "value": "1"}, {"name": "kernel.domainname", "value": "x"}]
    }
    errs = validate_pod(pod)
    assert fields(errs) == [("spec.securityContext.sysctls[0].name", INVALID)]
    assert errs[0].detail == "may not be specified when 'hostNetwork' is true"


def test_dns_none_message():
    pod = minimal_pod()
    pod["spec"]["dnsPolicy"] = "None"
    assert _messages(pod) == ["spec.dnsConfig: Required value: must provide `dnsConfig` when `dnsPolicy` is None"]


def test_validate_pod_spec_on_its_own_path():
    errs = validate_pod_spec({"containers": [{"name": "c"}]}, "spec.template.spec")
    assert fields(errs) == [("spec.template.spec.containers[0].image", REQUIRED)]


def test_validate_pod_without_metadata():
    pod = minimal_pod()
    pod["metadata"] = {"name": "BAD"}
    assert validate_pod(pod, include_metadata=False) == []
    assert ("metadata.name", INVALID) in fields(validate_pod(pod))


# --- string rules -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name,ok",
    [
        ("http", True),
        ("h2c", True),
        ("a-b-c", True),
        ("abcdefghijklmno", True),
        ("abcdefghijklmnop", False),
        ("HTTP", False),
        ("123", False),
        ("a--b", False),
        ("-a", False),
        ("a-", False),
        ("a_b", False),
        ("", False),
    ],
)
def test_port_names(name, ok):
    assert (is_valid_port_name(name) == []) is ok


@pytest.mark.parametrize(
    "name,ok",
    [
        ("PATH", True),
        ("my.env-name", True),
        ("_x", True),
        ("-x", True),
        (".x", True),
        ("1x", False),
        ("a b", False),
        (".", False),
        ("..", False),
        ("..x", False),
        ("a=b", False),
    ],
)
def test_env_var_names(name, ok):
    assert (is_env_var_name(name) == []) is ok


# --- updates ------------------------------------------------------------------------------


def stored_pod() -> dict:
    pod = full_pod()
    apply_defaults("", "v1", "Pod", pod)
    pod["metadata"]["uid"] = "u-1"
    return pod


def test_update_without_changes_is_valid():
    old = stored_pod()
    assert validate_pod_update(copy.deepcopy(old), old) == []


def test_update_image_is_allowed():
    old = stored_pod()
    new = copy.deepcopy(old)
    new["spec"]["containers"][0]["image"] = "nginx:1.26"
    new["spec"]["initContainers"][0]["image"] = "busybox:1.37"
    assert validate_pod_update(new, old) == []


def test_update_image_cannot_be_removed():
    old = stored_pod()
    new = copy.deepcopy(old)
    new["spec"]["containers"][0]["image"] = ""
    assert ("spec.containers[0].image", REQUIRED) in fields(validate_pod_update(new, old))


def test_update_other_field_is_forbidden_with_upstream_message():
    old = stored_pod()
    new = copy.deepcopy(old)
    new["spec"]["containers"][0]["ports"][0]["containerPort"] = 8080
    errs = validate_pod_update(new, old)
    assert fields(errs) == [("spec", FORBIDDEN)]
    assert errs[0].detail.startswith(
        "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,"
        "`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),"
        "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)\n"
    )
    assert errs[0].detail.startswith(POD_UPDATE_FORBIDDEN_MESSAGE)
    assert "spec.containers[0].ports[0].containerPort" in errs[0].detail
    assert errs[0].message().startswith("spec: Forbidden: pod updates may not change fields other than")


def test_update_nodename_is_forbidden():
    old = stored_pod()
    old["spec"].pop("nodeName")
    new = copy.deepcopy(old)
    new["spec"]["nodeName"] = "n1"
    assert fields(validate_pod_update(new, old)) == [("spec", FORBIDDEN)]


def test_update_adding_container_is_forbidden():
    old = stored_pod()
    new = copy.deepcopy(old)
    new["spec"]["containers"].append({"name": "extra", "image": "x"})
    errs = validate_pod_update(new, old)
    assert fields(errs) == [("spec.containers", FORBIDDEN)]
    assert errs[0].detail == "pod updates may not add or remove containers"


def test_update_semantically_equal_spec_is_not_a_change():
    old = stored_pod()
    new = copy.deepcopy(old)
    new["spec"]["containers"][0]["resources"]["limits"]["cpu"] = "0.5"
    new["spec"]["hostNetwork"] = False
    new["spec"]["imagePullSecrets"] = []
    assert validate_pod_update(new, old) == []


@pytest.mark.parametrize(
    "old_value,new_value,ok",
    [
        (None, 60, True),
        (3600, 60, True),
        (3600, 3600, True),
        (60, 3600, False),
        (60, None, False),
        (60, -1, False),
    ],
)
def test_update_active_deadline(old_value, new_value, ok):
    old = stored_pod()
    if old_value is None:
        old["spec"].pop("activeDeadlineSeconds")
    else:
        old["spec"]["activeDeadlineSeconds"] = old_value
    new = copy.deepcopy(old)
    if new_value is None:
        new["spec"].pop("activeDeadlineSeconds")
    else:
        new["spec"]["activeDeadlineSeconds"] = new_value
    errs = validate_pod_update(new, old)
    if ok:
        assert errs == []
    else:
        # A negative value also fails the create-time range rule, as upstream reports both.
        assert errs and set(fields(errs)) == {("spec.activeDeadlineSeconds", INVALID)}


def test_update_tolerations_additions_only():
    old = stored_pod()
    new = copy.deepcopy(old)
    new["spec"]["tolerations"].append({"key": "extra", "operator": "Exists"})
    new["spec"]["tolerations"][1]["tolerationSeconds"] = 10
    assert validate_pod_update(new, old) == []
    changed = copy.deepcopy(old)
    changed["spec"]["tolerations"][0]["value"] = "other"
    errs = validate_pod_update(changed, old)
    assert ("spec.tolerations", FORBIDDEN) in fields(errs)
    removed = copy.deepcopy(old)
    removed["spec"]["tolerations"].pop()
    assert ("spec.tolerations", FORBIDDEN) in fields(validate_pod_update(removed, old))


def test_update_grace_period_negative_to_one():
    old = stored_pod()
    old["spec"]["terminationGracePeriodSeconds"] = -1
    new = copy.deepcopy(old)
    new["spec"]["terminationGracePeriodSeconds"] = 1
    assert ("spec", FORBIDDEN) not in fields(validate_pod_update(new, old))
    new["spec"]["terminationGracePeriodSeconds"] = 2
    assert ("spec", FORBIDDEN) in fields(validate_pod_update(new, old))


def test_update_metadata_rules():
    old = stored_pod()
    new = copy.deepcopy(old)
    new["metadata"]["labels"]["extra"] = "ok"
    assert validate_pod_update(new, old) == []
    new["metadata"]["name"] = "other"
    assert ("metadata.name", INVALID) in fields(validate_pod_update(new, old))


def test_update_mirror_annotation_cannot_change():
    old = stored_pod()
    old["metadata"]["annotations"][names.ANNOTATION_CONFIG_MIRROR] = "h1"
    new = copy.deepcopy(old)
    new["metadata"]["annotations"][names.ANNOTATION_CONFIG_MIRROR] = "h2"
    key = f"metadata.annotations[{names.ANNOTATION_CONFIG_MIRROR}]"
    assert (key, FORBIDDEN) in fields(validate_pod_update(new, old))
    added = stored_pod()
    added["metadata"]["annotations"][names.ANNOTATION_CONFIG_MIRROR] = "h"
    assert (key, FORBIDDEN) in fields(validate_pod_update(added, stored_pod()))


def test_update_allows_existing_ephemeral_containers():
    old = stored_pod()
    old["spec"]["ephemeralContainers"] = [{"name": "dbg", "image": "busybox", "targetContainerName": "web"}]
    assert validate_pod_update(copy.deepcopy(old), old) == []


# --- the API server's pod strategy --------------------------------------------------------


def _pod_strategy():
    from apiserver_min.api.kinds import REGISTRY
    from apiserver_min.registry.core import PodStrategy
    from apiserver_min.registry.families import strategy_for

    strategy = strategy_for(REGISTRY.by_resource("", "v1", "pods"))
    assert isinstance(strategy, PodStrategy)
    return strategy


def _created(strategy) -> dict:
    pod = full_pod()
    strategy.prepare_for_create(pod)
    apply_defaults("", "v1", "Pod", pod)
    assert strategy.validate(pod) == []
    return pod


def test_strategy_rejects_invalid_pod_on_create():
    strategy = _pod_strategy()
    pod = minimal_pod()
    del pod["spec"]["containers"][0]["image"]
    pod["metadata"]["name"] = "Bad"
    strategy.prepare_for_create(pod)
    apply_defaults("", "v1", "Pod", pod)
    assert fields(strategy.validate(pod)) == [("metadata.name", INVALID), ("spec.containers[0].image", REQUIRED)]


def test_strategy_update_rules():
    strategy = _pod_strategy()
    old = _created(strategy)
    new = copy.deepcopy(old)
    new["spec"]["containers"][0]["image"] = "nginx:2"
    new["metadata"]["labels"]["x"] = "y"
    strategy.prepare_for_update(new, old)
    assert strategy.validate_update(new, old) == []
    bad = copy.deepcopy(old)
    bad["spec"]["restartPolicy"] = "Never"
    strategy.prepare_for_update(bad, old)
    assert fields(strategy.validate_update(bad, old)) == [("spec", FORBIDDEN)]


def test_strategy_update_keeps_existing_ephemeral_containers():
    strategy = _pod_strategy()
    old = _created(strategy)
    old["spec"]["ephemeralContainers"] = [
        {
            "name": "dbg",
            "image": "busybox",
            "targetContainerName": "web",
            "terminationMessagePolicy": "File",
            "imagePullPolicy": "IfNotPresent",
        }
    ]
    new = copy.deepcopy(old)
    new["metadata"]["labels"]["x"] = "y"
    strategy.prepare_for_update(new, old)
    assert strategy.validate_update(new, old) == []


def test_strategy_binding_and_status_writes_skip_spec_rules():
    strategy = _pod_strategy()
    old = _created(strategy)
    old["spec"].pop("nodeName")
    bound = copy.deepcopy(old)
    bound["spec"]["nodeName"] = "node-1"
    bound["status"]["conditions"] = [{"type": "PodScheduled", "status": "True"}]
    strategy.keep_system_metadata(bound, old)
    assert strategy.validate_update(bound, old) == []
    status = copy.deepcopy(old)
    status["status"] = {"phase": "Running"}
    strategy.prepare_for_status_update(status, old)
    assert strategy.validate_update(status, old) == []
