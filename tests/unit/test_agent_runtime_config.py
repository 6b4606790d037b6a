"""The CRI configs the agent builds for pods and containers, and pod volumes.

Builders are checked field by field against upstream's rules; volumes are set
up for real in a temporary root (tmpfs mounts need root); the last tests hand
the built configs to the fake CRI runtime through the real client.
"""

from __future__ import annotations

import base64
import copy
import json
import logging
import os
import socket
import stat

import pytest

from agent.runtime import container as container_mod
from agent.runtime.container import (
    ContainerSetup,
    build_container_config,
    container_hash,
    linux_resources,
    oom_score_adj,
    pod_qos_class,
    read_termination_message,
)
from agent.runtime.context import NodeContext
from agent.runtime.env import expand, make_environment, service_environment
from agent.runtime.errors import PodConfigError
from agent.runtime.sandbox import (
    build_sandbox_config,
    check_sysctls,
    dns_config,
    parse_resolv_conf,
    sysctl_allowlist_problems,
)
from agent.runtime.volumes import DATA_DIR_NAME, VolumeManager, atomic_write, mount_points
from apiserver_min.api import names
from apiserver_min.api.defaults import apply_defaults
from cri import api_pb2 as pb
from cri.client import CriClient
from cri.fake import FakeRuntime

GiB = 1 << 30
MiB = 1 << 20

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="mounting tmpfs needs root")


# --- fixtures ---------------------------------------------------------------------------------


@pytest.fixture
def resolv(tmp_path):
    path = tmp_path / "resolv.conf"
    path.write_text(
        "# host resolver\n"
        "nameserver 10.0.0.2\n"
        "nameserver 10.0.0.3\n"
        "search old.example\n"
        "search corp.example. lab.example\n"
        "options timeout:2 attempts:3\n"
        "options timeout:1\n"
    )
    return str(path)


@pytest.fixture
def ctx(tmp_path, resolv):
    return NodeContext(
        node_name="node-1",
        root_dir=str(tmp_path / "root"),
        pod_logs_dir=str(tmp_path / "logs"),
        cluster_dns=("10.96.0.10",),
        cluster_domain="cluster.local",
        resolv_conf=resolv,
        host_ip="192.168.1.5",
        node_allocatable_cpu_millis=4000,
        node_allocatable_memory=8 * GiB,
    )


def make_pod(containers=None, *, name="web", namespace="ns1", uid="uid-1", **spec) -> dict:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid,
            "labels": {"app": "web"},
            "annotations": {"note": "x"},
        },
        "spec": {"containers": containers or [{"name": "c", "image": "orch.local/busybox:1"}], **spec},
    }
    apply_defaults("", "v1", "Pod", pod)
    return pod


def sandbox(pod, ctx, **kw):
    return build_sandbox_config(
        pod, ctx, attempt=kw.pop("attempt", 0), cgroup_parent=kw.pop("cgroup_parent", "/orchpods/pod-uid-1")
    )


def build(pod, ctx, c=None, **kw):
    c = c if c is not None else pod["spec"]["containers"][0]
    kw.setdefault("restart_count", 0)
    kw.setdefault("pod_ip", "10.88.0.7")
    kw.setdefault("volume_paths", {})
    return build_container_config(pod, c, ctx, **kw)


# --- sandbox ------------------------------------------------------------------------------------


def test_sandbox_identity_labels_annotations_logdir(ctx):
    pod = make_pod()
    pod["metadata"]["labels"][names.CRI_LABEL_POD_NAME] = "spoofed"
    cfg = sandbox(pod, ctx, attempt=2, cgroup_parent="/orchpods/burstable/poduid-1")
    assert (cfg.metadata.name, cfg.metadata.namespace, cfg.metadata.uid, cfg.metadata.attempt) == (
        "web",
        "ns1",
        "uid-1",
        2,
    )
    assert dict(cfg.labels) == {
        "app": "web",
        names.CRI_LABEL_POD_NAME: "web",
        names.CRI_LABEL_POD_NAMESPACE: "ns1",
        names.CRI_LABEL_POD_UID: "uid-1",
        names.CRI_LABEL_MANAGED: "true",
    }
    assert dict(cfg.annotations) == {"note": "x"}
    assert cfg.log_directory == os.path.join(ctx.pod_logs_dir, "ns1_web_uid-1")
    assert cfg.log_directory == ctx.pod_log_dir("ns1", "web", "uid-1")
    assert cfg.hostname == "web"
    assert cfg.linux.cgroup_parent == "/orchpods/burstable/poduid-1"
    assert cfg.linux.security_context.seccomp.profile_type == pb.SecurityProfile.RuntimeDefault
    assert not cfg.linux.security_context.readonly_rootfs


def test_sandbox_hostname_rules(ctx):
    assert sandbox(make_pod(hostname="db-0"), ctx).hostname == "db-0"
    long_name = "a" * 62 + "-b" + "c" * 10
    assert sandbox(make_pod(name=long_name), ctx).hostname == "a" * 62
    with pytest.raises(PodConfigError) as err:
        sandbox(make_pod(hostname="Not_Valid"), ctx)
    assert err.value.reason == "CreatePodSandboxError"
    assert "Not_Valid" in err.value.message


def test_host_network_sandbox_has_no_hostname_and_node_namespace(ctx):
    cfg = sandbox(make_pod(hostNetwork=True, hostname="x"), ctx)
    assert cfg.hostname == ""
    ns = cfg.linux.security_context.namespace_options
    assert ns.network == pb.NODE and ns.ipc == pb.POD and ns.pid == pb.CONTAINER


@pytest.mark.parametrize(
    "spec, want",
    [
        ({}, (pb.POD, pb.POD, pb.CONTAINER)),
        ({"hostIPC": True}, (pb.POD, pb.NODE, pb.CONTAINER)),
        ({"hostPID": True, "shareProcessNamespace": True}, (pb.POD, pb.POD, pb.NODE)),
        ({"shareProcessNamespace": True}, (pb.POD, pb.POD, pb.POD)),
    ],
)
def test_namespace_options(ctx, spec, want):
    ns = sandbox(make_pod(**spec), ctx).linux.security_context.namespace_options
    assert (ns.network, ns.ipc, ns.pid) == want


def test_sandbox_security_context(ctx):
    pod = make_pod(
        securityContext={"runAsUser": 1000, "runAsGroup": 3000, "fsGroup": 2000, "supplementalGroups": [4000, 5000]},
        initContainers=[{"name": "init", "image": "i", "securityContext": {"privileged": True}}],
    )
    sc = sandbox(pod, ctx).linux.security_context
    assert sc.run_as_user.value == 1000 and sc.run_as_group.value == 3000
    assert list(sc.supplemental_groups) == [2000, 4000, 5000]
    assert sc.privileged
    plain = sandbox(make_pod(), ctx).linux.security_context
    assert not plain.privileged and not plain.HasField("run_as_user")


def test_port_mappings(ctx):
    pod = make_pod(
        [
            {
                "name": "c",
                "image": "i",
                "ports": [
                    {"containerPort": 80},
                    {"name": "dns", "containerPort": 53, "hostPort": 5353, "protocol": "UDP", "hostIP": "127.0.0.1"},
                    {"name": "dns", "containerPort": 54, "hostPort": 5454},
                    {"containerPort": 443, "hostPort": 8443, "protocol": "SCTP"},
                ],
            }
        ]
    )
    got = [(m.protocol, m.container_port, m.host_port, m.host_ip) for m in sandbox(pod, ctx).port_mappings]
    assert got == [(pb.UDP, 53, 5353, "127.0.0.1"), (pb.SCTP, 443, 8443, "")]
    # The host network defaults hostPort to containerPort.
    host = make_pod([{"name": "c", "image": "i", "ports": [{"containerPort": 8080}]}], hostNetwork=True)
    assert [(m.container_port, m.host_port) for m in sandbox(host, ctx).port_mappings] == [(8080, 8080)]


# --- DNS ---------------------------------------------------------------------------------------


def test_parse_resolv_conf():
    servers, searches, options = parse_resolv_conf(
        "nameserver 1.1.1.1\n  # nameserver 9.9.9.9\nnameserver\nsearch a.example. . b\n"
        "options ndots:2 rotate\noptions ndots:3\nnameserver 8.8.8.8\n"
    )
    assert servers == ["1.1.1.1", "8.8.8.8"]
    assert searches == ["a.example", "b"]
    assert options == ["ndots:3", "rotate"]


def test_dns_cluster_first(ctx):
    cfg = dns_config(make_pod(), ctx)
    assert list(cfg.servers) == ["10.96.0.10"]
    assert list(cfg.searches) == [
        "ns1.svc.cluster.local",
        "svc.cluster.local",
        "cluster.local",
        "corp.example",
        "lab.example",
    ]
    assert list(cfg.options) == ["ndots:5"]
    assert sandbox(make_pod(), ctx).dns_config == cfg


def test_dns_cluster_first_without_cluster_dns_falls_back(ctx, caplog):
    no_dns = NodeContext(**{**ctx.__dict__, "cluster_dns": ()})
    with caplog.at_level(logging.INFO):
        cfg = dns_config(make_pod(), no_dns)
    assert list(cfg.servers) == ["10.0.0.2", "10.0.0.3"]
    assert list(cfg.searches) == ["corp.example", "lab.example"]
    assert list(cfg.options) == ["timeout:1", "attempts:3"]
    assert any("falls back to the Default policy" in r.getMessage() for r in caplog.records)


def test_dns_host_network(ctx):
    # ClusterFirst on the host network means the host's resolver ...
    cfg = dns_config(make_pod(hostNetwork=True), ctx)
    assert list(cfg.servers) == ["10.0.0.2", "10.0.0.3"]
    # ... ClusterFirstWithHostNet asks for the cluster's.
    cfg = dns_config(make_pod(hostNetwork=True, dnsPolicy="ClusterFirstWithHostNet"), ctx)
    assert list(cfg.servers) == ["10.96.0.10"]
    assert list(cfg.options) == ["ndots:5"]


def test_dns_default_and_empty_resolv_conf(ctx):
    cfg = dns_config(make_pod(dnsPolicy="Default"), ctx)
    assert (list(cfg.servers), list(cfg.searches), list(cfg.options)) == (
        ["10.0.0.2", "10.0.0.3"],
        ["corp.example", "lab.example"],
        ["timeout:1", "attempts:3"],
    )
    none = NodeContext(**{**ctx.__dict__, "resolv_conf": ""})
    cfg = dns_config(make_pod(dnsPolicy="Default"), none)
    assert (list(cfg.servers), list(cfg.searches), list(cfg.options)) == (["127.0.0.1"], ["."], [])
    v6 = NodeContext(**{**none.__dict__, "host_ip": "fd00::5"})
    assert list(dns_config(make_pod(dnsPolicy="Default"), v6).servers) == ["::1"]
    # ClusterFirst with cluster DNS and no host file: only the cluster searches.
    cfg = dns_config(make_pod(), none)
    assert list(cfg.searches) == ["ns1.svc.cluster.local", "svc.cluster.local", "cluster.local"]


def test_dns_none_and_dns_config_merge(ctx):
    extra = {
        "nameservers": ["1.2.3.4"],
        "searches": ["my.example", "svc.cluster.local"],
        "options": [{"name": "ndots", "value": "2"}, {"name": "edns0"}],
    }
    cfg = dns_config(make_pod(dnsPolicy="None", dnsConfig=extra), ctx)
    assert (list(cfg.servers), list(cfg.searches), list(cfg.options)) == (
        ["1.2.3.4"],
        ["my.example", "svc.cluster.local"],
        ["ndots:2", "edns0"],
    )
    cfg = dns_config(make_pod(dnsConfig=extra), ctx)
    assert list(cfg.servers) == ["10.96.0.10", "1.2.3.4"]
    assert list(cfg.searches)[-1] == "my.example"  # duplicates dropped
    assert list(cfg.searches).count("svc.cluster.local") == 1
    assert list(cfg.options) == ["ndots:2", "edns0"]
    cfg = dns_config(make_pod(dnsPolicy="Default", dnsConfig={"options": [{"name": "timeout", "value": "5"}]}), ctx)
    assert list(cfg.options) == ["timeout:5", "attempts:3"]


def test_dns_limits(ctx, caplog):
    extra = {
        "nameservers": ["1.1.1.1", "1.1.1.2", "1.1.1.3"],
        "searches": [f"s{i}.example" for i in range(40)] + ["x" * 254],
    }
    with caplog.at_level(logging.INFO):
        cfg = dns_config(make_pod(dnsPolicy="None", dnsConfig=extra), ctx)
    assert list(cfg.servers) == ["1.1.1.1", "1.1.1.2", "1.1.1.3"]
    assert len(cfg.searches) == 32 and cfg.searches[-1] == "s31.example"
    cfg = dns_config(make_pod(dnsConfig=extra), ctx)
    assert list(cfg.servers) == ["10.96.0.10", "1.1.1.1", "1.1.1.2"]
    long_searches = {"searches": ["d" * 200 + f"{i}.example" for i in range(12)]}
    cfg = dns_config(make_pod(dnsPolicy="None", dnsConfig=long_searches), ctx)
    assert len(" ".join(cfg.searches)) <= 2048 and len(cfg.searches) == 9
    messages = " ".join(r.getMessage() for r in caplog.records)
    assert "Nameserver limits were exceeded" in messages
    assert "Search Line limits were exceeded" in messages


def test_dns_missing_resolv_conf(ctx, tmp_path):
    missing = NodeContext(**{**ctx.__dict__, "resolv_conf": str(tmp_path / "nope")})
    with pytest.raises(PodConfigError) as err:
        sandbox(make_pod(), missing)
    assert err.value.reason == "CreatePodSandboxError" and "nope" in err.value.message
    # dnsPolicy None never reads it.
    dns_config(make_pod(dnsPolicy="None"), missing)


# --- sysctls -----------------------------------------------------------------------------------


def with_sysctls(*pairs, **spec):
    return make_pod(securityContext={"sysctls": [{"name": n, "value": v} for n, v in pairs]}, **spec)


def test_safe_sysctls_pass_to_the_sandbox(ctx):
    pod = with_sysctls(("kernel.shm_rmid_forced", "1"), ("net/ipv4/ip_local_port_range", "1024 65000"))
    assert dict(sandbox(pod, ctx).linux.sysctls) == {
        "kernel.shm_rmid_forced": "1",
        "net.ipv4.ip_local_port_range": "1024 65000",
    }


def test_unsafe_sysctl_rejected(ctx):
    with pytest.raises(PodConfigError) as err:
        sandbox(with_sysctls(("net.core.somaxconn", "1024")), ctx)
    assert err.value.reason == "SysctlForbidden"
    assert err.value.message == 'forbidden sysctl: "net.core.somaxconn" not allowlisted'


def test_allowed_unsafe_sysctls_and_patterns(ctx):
    allowed = NodeContext(
        **{**ctx.__dict__, "allowed_unsafe_sysctls": ("net.core.somaxconn", "kernel.msg*", "vm.swappiness")}
    )
    pod = with_sysctls(("net.core.somaxconn", "1024"), ("kernel.msgmax", "65536"))
    assert check_sysctls(pod, allowed) == {"net.core.somaxconn": "1024", "kernel.msgmax": "65536"}
    # Not namespaced: never allowed, and named as a problem for the config check.
    with pytest.raises(PodConfigError, match="vm.swappiness"):
        check_sysctls(with_sysctls(("vm.swappiness", "10")), allowed)
    assert sysctl_allowlist_problems(allowed.allowed_unsafe_sysctls) == [
        'the sysctls "vm.swappiness" are not known to be namespaced'
    ]
    with pytest.raises(PodConfigError, match="kernel.msgmax"):
        check_sysctls(with_sysctls(("kernel.msgmax", "1")), ctx)


def test_host_namespace_sysctls_rejected(ctx):
    with pytest.raises(PodConfigError) as err:
        sandbox(with_sysctls(("net.ipv4.tcp_syncookies", "1"), hostNetwork=True), ctx)
    assert err.value.reason == "SysctlForbidden"
    assert err.value.message == ('forbidden sysctl: "net.ipv4.tcp_syncookies" not allowed with host net enabled')
    with pytest.raises(PodConfigError, match="host ipc"):
        check_sysctls(with_sysctls(("kernel.shm_rmid_forced", "1"), hostIPC=True), ctx)
    assert check_sysctls(with_sysctls(("kernel.shm_rmid_forced", "1"), hostNetwork=True), ctx)


# --- expansion and environment ----------------------------------------------------------------


@pytest.mark.parametrize(
    "text, want",
    [
        ("$(A)", "alpha"),
        ("x$(A)y$(B)z", "xalphaybetaz"),
        ("$$(A)", "$(A)"),
        ("$$$(A)", "$alpha"),
        ("$$$$", "$$"),
        ("$(UNDEFINED)", "$(UNDEFINED)"),
        ("$(A", "$(A"),
        ("$A", "$A"),
        ("cost: 5$", "cost: 5$"),
        ("$()", "$()"),
        ("$(EMPTY)!", "!"),
        ("ü$(A)ü", "üalphaü"),
    ],
)
def test_expand(text, want):
    assert expand(text, {"A": "alpha", "B": "beta", "EMPTY": ""}) == want


def test_environment_order_and_expansion(ctx):
    c = {
        "name": "c",
        "image": "i",
        "env": [
            {"name": "LATER_REF", "value": "$(B)"},
            {"name": "A", "value": "a"},
            {"name": "B", "value": "$(A)-b"},
            {"name": "ESC", "value": "$$(A)"},
            {"name": "A", "value": "again"},
        ],
    }
    env = make_environment(make_pod([c]), c, ctx, pod_ip="", pod_ips=(), objects=None)
    assert env == [("LATER_REF", "$(B)"), ("A", "again"), ("B", "a-b"), ("ESC", "$(A)")]


def test_field_refs(ctx):
    def ref(path):
        return {"valueFrom": {"fieldRef": {"fieldPath": path}}}

    c = {
        "name": "c",
        "image": "i",
        "env": [
            {"name": "NAME", **ref("metadata.name")},
            {"name": "NS", **ref("metadata.namespace")},
            {"name": "UID", **ref("metadata.uid")},
            {"name": "APP", **ref("metadata.labels['app']")},
            {"name": "NOTE", **ref("metadata.annotations['note']")},
            {"name": "NONE", **ref("metadata.labels['missing']")},
            {"name": "NODE", **ref("spec.nodeName")},
            {"name": "SA", **ref("spec.serviceAccountName")},
            {"name": "HOST", **ref("status.hostIP")},
            {"name": "IP", **ref("status.podIP")},
            {"name": "IPS", **ref("status.podIPs")},
            {"name": "LABELS", **ref("metadata.labels")},
        ],
    }
    pod = make_pod([c], nodeName="node-1", serviceAccountName="robot")
    pod["metadata"]["labels"]["tier"] = 'f"e'
    env = dict(make_environment(pod, c, ctx, pod_ip="10.88.0.7", pod_ips=("fd00::7", "10.88.0.7"), objects=None))
    assert env == {
        "NAME": "web",
        "NS": "ns1",
        "UID": "uid-1",
        "APP": "web",
        "NOTE": "x",
        "NONE": "",
        "NODE": "node-1",
        "SA": "robot",
        "HOST": "192.168.1.5",
        "IP": "10.88.0.7",
        "IPS": "10.88.0.7,fd00::7",
        "LABELS": 'app="web"\ntier="f\\"e"',
    }
    v6 = NodeContext(**{**ctx.__dict__, "host_ip": "fd00::1"})
    env = dict(make_environment(pod, c, v6, pod_ip="10.88.0.7", pod_ips=("10.88.0.7", "fd00::7"), objects=None))
    assert env["IP"] == "fd00::7" and env["IPS"] == "fd00::7,10.88.0.7"
    bad = {"name": "c", "image": "i", "env": [{"name": "X", **ref("spec.hostname")}]}
    with pytest.raises(PodConfigError) as err:
        make_environment(make_pod([bad]), bad, ctx, pod_ip="", pod_ips=(), objects=None)
    assert err.value.reason == "CreateContainerConfigError"
    assert "unsupported fieldPath: spec.hostname" in err.value.message


def test_resource_field_refs(ctx):
    def ref(resource, divisor=None):
        r = {"resource": resource}
        if divisor:
            r["divisor"] = divisor
        return {"valueFrom": {"resourceFieldRef": r}}

    c = {
        "name": "c",
        "image": "i",
        "resources": {"limits": {"cpu": "250m", "memory": "100Mi"}, "requests": {"cpu": "100m", "memory": "64Mi"}},
        "env": [
            {"name": "CPU", **ref("limits.cpu")},
            {"name": "CPU_M", **ref("limits.cpu", "1m")},
            {"name": "MEM", **ref("limits.memory")},
            {"name": "MEM_MI", **ref("limits.memory", "1Mi")},
            {"name": "MEM_GI", **ref("limits.memory", "1Gi")},
            {"name": "REQ_CPU", **ref("requests.cpu", "1m")},
            {"name": "REQ_MEM", **ref("requests.memory", "1Mi")},
            {"name": "EPH_REQ", **ref("requests.ephemeral-storage")},
        ],
    }
    env = dict(make_environment(make_pod([c]), c, ctx, pod_ip="", pod_ips=(), objects=None))
    assert env == {
        "CPU": "1",
        "CPU_M": "250",
        "MEM": str(100 * MiB),
        "MEM_MI": "100",
        "MEM_GI": "1",
        "REQ_CPU": "100",
        "REQ_MEM": "64",
        "EPH_REQ": "0",
    }
    # Unset limits default to the node's allocatable.
    unlimited = {
        "name": "c",
        "image": "i",
        "env": [
            {"name": "CPU", **ref("limits.cpu")},
            {"name": "MEM", **ref("limits.memory")},
            {"name": "EPH", **ref("limits.ephemeral-storage")},
        ],
    }
    env = dict(make_environment(make_pod([unlimited]), unlimited, ctx, pod_ip="", pod_ips=(), objects=None))
    assert env["CPU"] == "4" and env["MEM"] == str(8 * GiB)
    assert int(env["EPH"]) > 0


class Objects:
    """An ObjectGetter over a dict, counting calls."""

    def __init__(self, objs):
        self.objs = objs
        self.calls = []

    def __call__(self, kind, namespace, name):
        self.calls.append((kind, namespace, name))
        return self.objs.get((kind, namespace, name))


def b64(text):
    return base64.b64encode(text.encode()).decode()


OBJECTS = {
    ("ConfigMap", "ns1", "settings"): {
        "data": {"MODE": "fast", "bad key": "x", "LEVEL": "3"},
        "binaryData": {"blob": b64("bin")},
    },
    ("Secret", "ns1", "creds"): {"data": {"PASSWORD": b64("s3cret"), "USER": b64("admin")}},
}


def test_configmap_and_secret_env(ctx):
    c = {
        "name": "c",
        "image": "i",
        "envFrom": [
            {"configMapRef": {"name": "settings"}, "prefix": "CFG_"},
            {"secretRef": {"name": "creds"}},
            {"configMapRef": {"name": "absent", "optional": True}},
        ],
        "env": [
            {"name": "USER", "value": "override"},
            {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "MODE"}}},
            {"name": "PW", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "PASSWORD"}}},
            {"name": "OPT", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "nope", "optional": True}}},
            {"name": "OPT2", "valueFrom": {"configMapKeyRef": {"name": "gone", "key": "k", "optional": True}}},
            {"name": "REF", "value": "$(CFG_LEVEL)/$(PW)"},
        ],
    }
    objects = Objects(OBJECTS)
    env = make_environment(make_pod([c]), c, ctx, pod_ip="", pod_ips=(), objects=objects)
    assert env == [
        ("CFG_LEVEL", "3"),
        ("CFG_MODE", "fast"),
        ("PASSWORD", "s3cret"),
        ("USER", "override"),
        ("MODE", "fast"),
        ("PW", "s3cret"),
        ("REF", "3/s3cret"),
    ]
    # Each object is fetched once per build.
    assert objects.calls.count(("ConfigMap", "ns1", "settings")) == 1


def test_missing_env_sources(ctx):
    def env_of(c, objects):
        return make_environment(make_pod([c]), c, ctx, pod_ip="", pod_ips=(), objects=objects)

    ref = {
        "name": "c",
        "image": "i",
        "env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "x", "key": "k"}}}],
    }
    for objects in (None, Objects({})):
        with pytest.raises(PodConfigError) as err:
            env_of(ref, objects)
        assert (err.value.reason, err.value.message) == ("CreateContainerConfigError", 'configmap "x" not found')
    optional = copy.deepcopy(ref)
    optional["env"][0]["valueFrom"]["configMapKeyRef"]["optional"] = True
    assert env_of(optional, None) == []
    with pytest.raises(PodConfigError, match='secret "creds" not found'):
        env_of({"name": "c", "image": "i", "envFrom": [{"secretRef": {"name": "creds"}}]}, None)
    with pytest.raises(PodConfigError, match="couldn't find key nope in Secret ns1/creds"):
        env_of(
            {
                "name": "c",
                "image": "i",
                "env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "nope"}}}],
            },
            Objects(OBJECTS),
        )

    def broken(kind, namespace, name):
        raise TimeoutError("cache not synced")

    with pytest.raises(PodConfigError, match="cache not synced"):
        env_of(ref, broken)


# --- container config -------------------------------------------------------------------------


def full_container(**extra):
    c = {
        "name": "app",
        "image": "orch.local/busybox:1",
        "command": ["/bin/sh", "-c", "echo $(GREETING) $$(GREETING) $(NOPE)"],
        "args": ["$(GREETING)"],
        "workingDir": "/work",
        "env": [{"name": "GREETING", "value": "hi"}],
        "ports": [{"name": "http", "containerPort": 8080}],
        "lifecycle": {"preStop": {"exec": {"command": ["/bin/sh", "-c", "sleep 1"]}}},
        "stdin": True,
        "tty": True,
    }
    c.update(extra)
    return c


def test_container_config_basics(ctx):
    pod = make_pod([full_container()], terminationGracePeriodSeconds=45)
    pod["metadata"]["deletionGracePeriodSeconds"] = 10
    setup = build(pod, ctx, restart_count=3)
    assert isinstance(setup, ContainerSetup)
    cfg = setup.config
    assert (cfg.metadata.name, cfg.metadata.attempt) == ("app", 3)
    assert cfg.image.image == "orch.local/busybox:1"
    assert list(cfg.command) == ["/bin/sh", "-c", "echo hi $(GREETING) $(NOPE)"]
    assert list(cfg.args) == ["hi"]
    assert cfg.working_dir == "/work"
    assert [(e.key, e.value) for e in cfg.envs] == [("GREETING", "hi")]
    assert cfg.log_path == "app/3.log"
    assert os.path.isdir(os.path.join(ctx.pod_log_dir("ns1", "web", "uid-1"), "app"))
    assert cfg.stdin and cfg.tty and not cfg.stdin_once
    assert dict(cfg.labels) == {
        names.CRI_LABEL_POD_NAME: "web",
        names.CRI_LABEL_POD_NAMESPACE: "ns1",
        names.CRI_LABEL_POD_UID: "uid-1",
        names.CRI_LABEL_CONTAINER_NAME: "app",
        names.CRI_LABEL_MANAGED: "true",
    }
    ann = dict(cfg.annotations)
    assert ann[names.CRI_ANNOTATION_CONTAINER_HASH] == container_hash(pod["spec"]["containers"][0])
    assert ann[names.CRI_ANNOTATION_CONTAINER_RESTART_COUNT] == "3"
    assert ann[names.CRI_ANNOTATION_TERMINATION_MESSAGE_PATH] == "/dev/termination-log"
    assert ann[names.CRI_ANNOTATION_TERMINATION_MESSAGE_POLICY] == "File"
    assert ann[names.CRI_ANNOTATION_POD_TERMINATION_GRACE_PERIOD] == "45"
    assert ann[names.CRI_ANNOTATION_POD_DELETION_GRACE_PERIOD] == "10"
    assert json.loads(ann[names.CRI_ANNOTATION_PRESTOP_HANDLER]) == {"exec": {"command": ["/bin/sh", "-c", "sleep 1"]}}
    assert json.loads(ann[names.CRI_ANNOTATION_CONTAINER_PORTS]) == [
        {"name": "http", "containerPort": 8080, "protocol": "TCP"}
    ]
    plain = build(make_pod(), ctx).config.annotations
    assert names.CRI_ANNOTATION_PRESTOP_HANDLER not in plain
    assert names.CRI_ANNOTATION_CONTAINER_PORTS not in plain


def test_termination_message_file(ctx):
    pod = make_pod()
    first = build(pod, ctx)
    second = build(pod, ctx, restart_count=1)
    for setup in (first, second):
        path = setup.termination_message_host_path
        assert os.path.dirname(path) == os.path.join(ctx.pod_dir("uid-1"), "containers", "c")
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o666
        assert os.path.getsize(path) == 0
        tm = [m for m in setup.config.mounts if m.container_path == "/dev/termination-log"]
        assert [m.host_path for m in tm] == [path] and not tm[0].readonly
    assert first.termination_message_host_path != second.termination_message_host_path
    no_msg = make_pod([{"name": "c", "image": "i", "terminationMessagePath": ""}])
    no_msg["spec"]["containers"][0]["terminationMessagePath"] = ""
    setup = build(no_msg, ctx)
    assert setup.termination_message_host_path == ""
    assert not any(m.container_path == "/dev/termination-log" for m in setup.config.mounts)


def test_read_termination_message(tmp_path):
    path = tmp_path / "msg"
    assert read_termination_message(str(path)) == ""
    path.write_bytes(b"x" * 5000 + b"the end")
    assert read_termination_message(str(path)) == ("x" * 5000 + "the end")[-4096:]
    assert read_termination_message(str(path), limit=7) == "the end"
    assert read_termination_message(str(tmp_path)).startswith("Error on reading termination log")


def test_resources_and_cfs(ctx):
    def res(resources, context=ctx):
        c = {"name": "c", "image": "i", "resources": resources}
        return linux_resources(make_pod([c]), make_pod([c])["spec"]["containers"][0], context)

    r = res({"requests": {"cpu": "500m", "memory": "64Mi"}, "limits": {"cpu": "1500m", "memory": "128Mi"}})
    assert (r.cpu_shares, r.cpu_quota, r.cpu_period, r.memory_limit_in_bytes) == (512, 150000, 100000, 128 * MiB)
    # A limit alone: the API copies it into requests, and the builder falls back to it too.
    r = res({"limits": {"cpu": "2"}})
    assert (r.cpu_shares, r.cpu_quota) == (2048, 200000)
    c = {"name": "c", "image": "i", "resources": {"limits": {"cpu": "2"}}}
    raw_pod = {"metadata": {"name": "p", "uid": "u"}, "spec": {"containers": [c]}}
    assert linux_resources(raw_pod, c, ctx).cpu_shares == 2048
    r = res({})
    assert (r.cpu_shares, r.cpu_quota, r.cpu_period, r.memory_limit_in_bytes) == (2, 0, 100000, 0)
    assert res({"requests": {"cpu": "1m"}, "limits": {"cpu": "1m"}}).cpu_quota == 1000
    assert res({"requests": {"cpu": "1m"}}).cpu_shares == 2
    assert res({"requests": {"cpu": "1000"}}).cpu_shares == 262144
    no_cfs = NodeContext(**{**ctx.__dict__, "cpu_cfs_quota": False})
    r = res({"limits": {"cpu": "1"}}, no_cfs)
    assert (r.cpu_quota, r.cpu_period) == (0, 0)
    custom = NodeContext(**{**ctx.__dict__, "cpu_cfs_quota_period_us": 50_000})
    r = res({"limits": {"cpu": "1"}}, custom)
    assert (r.cpu_quota, r.cpu_period) == (50000, 50000)


def test_hugepage_limits(ctx, monkeypatch):
    monkeypatch.setattr(container_mod, "_huge_page_sizes", lambda: ("2MB", "1GB"))
    c = {"name": "c", "image": "i", "resources": {"limits": {"hugepages-2Mi": "64Mi", "memory": "1Gi", "cpu": "1"}}}
    r = linux_resources(make_pod([c]), c, ctx)
    assert [(h.page_size, h.limit) for h in r.hugepage_limits] == [("2MB", 64 * MiB), ("1GB", 0)]


def test_qos_and_oom_scores(ctx):
    guaranteed = {"name": "c", "image": "i", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}
    pod = make_pod([guaranteed])
    assert pod_qos_class(pod) == "Guaranteed"
    assert oom_score_adj(pod, pod["spec"]["containers"][0], 8 * GiB) == -997
    best = make_pod()
    assert pod_qos_class(best) == "BestEffort"
    assert oom_score_adj(best, best["spec"]["containers"][0], 8 * GiB) == 1000

    def burstable(memory_request):
        c = {"name": "c", "image": "i", "resources": {"requests": {"memory": memory_request}}}
        pod = make_pod([c])
        assert pod_qos_class(pod) == "Burstable"
        return oom_score_adj(pod, pod["spec"]["containers"][0], 8 * GiB)

    assert burstable("2Gi") == 750  # 1000 - 1000 * 2/8
    assert burstable("1") == 999  # never the BestEffort score
    assert burstable("8Gi") == 3  # never below upstream's floor
    assert burstable("16Gi") == 3
    # Requests differing from limits make a pod Burstable.
    mixed = make_pod(
        [
            {
                "name": "c",
                "image": "i",
                "resources": {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "500m", "memory": "1Gi"}},
            }
        ]
    )
    assert pod_qos_class(mixed) == "Burstable"
    # The builder uses the node's allocatable memory as capacity.
    c = {"name": "c", "image": "i", "resources": {"requests": {"memory": "4Gi"}}}
    assert build(make_pod([c]), ctx).config.linux.resources.oom_score_adj == 500
    # A node-critical static pod is protected like a Guaranteed one.
    static = make_pod(priorityClassName="system-node-critical")
    static["metadata"]["annotations"][names.ANNOTATION_CONFIG_SOURCE] = "file"
    assert oom_score_adj(static, static["spec"]["containers"][0], 8 * GiB) == -997


def test_container_hash_stable_and_sensitive():
    base = {
        "name": "c",
        "image": "busybox:1",
        "command": ["sleep", "1"],
        "resources": {"limits": {"cpu": "1"}},
        "env": [{"name": "A", "value": "1"}],
    }
    h = container_hash(base)
    assert h == container_hash(copy.deepcopy(base))
    reordered = dict(reversed(list(base.items())))
    assert container_hash(reordered) == h
    assert container_hash({**base, "ports": [], "workingDir": "", "stdin": None}) == h
    assert container_hash({**base, "resources": {"limits": {"cpu": "1000m"}}}) == h
    assert (
        len(
            {
                h,
                container_hash({**base, "image": "busybox:2"}),
                container_hash({**base, "command": ["sleep", "2"]}),
                container_hash({**base, "env": [{"name": "A", "value": "2"}]}),
                container_hash({**base, "resources": {"limits": {"cpu": "2"}}}),
                container_hash({**base, "stdin": True}),
            }
        )
        == 6
    )
    assert h == format(int(h, 16), "x") and int(h, 16) < 2**32


def test_volume_mounts(ctx, tmp_path):
    data = tmp_path / "data"
    data.mkdir(mode=0o750)
    cm_dir = tmp_path / "cm"
    cm_dir.mkdir()
    c = {
        "name": "c",
        "image": "i",
        "env": [{"name": "SUB", "value": "from-env"}],
        "volumeMounts": [
            {"name": "data", "mountPath": "/data"},
            {"name": "data", "mountPath": "/ro", "readOnly": True, "mountPropagation": "HostToContainer"},
            {"name": "data", "mountPath": "/bi", "mountPropagation": "Bidirectional"},
            {"name": "data", "mountPath": "/sub", "subPath": "a/b"},
            {"name": "data", "mountPath": "/expr", "subPathExpr": "x-$(SUB)"},
            {"name": "cfg", "mountPath": "/etc/cfg"},
        ],
    }
    pod = make_pod([c], volumes=[{"name": "data", "emptyDir": {}}, {"name": "cfg", "configMap": {"name": "settings"}}])
    setup = build(pod, ctx, volume_paths={"data": str(data), "cfg": str(cm_dir)})
    mounts = [(m.container_path, m.host_path, m.readonly, m.propagation) for m in setup.config.mounts]
    assert mounts[:6] == [
        ("/data", str(data), False, pb.PROPAGATION_PRIVATE),
        ("/ro", str(data), True, pb.PROPAGATION_HOST_TO_CONTAINER),
        ("/bi", str(data), False, pb.PROPAGATION_BIDIRECTIONAL),
        ("/sub", str(data / "a" / "b"), False, pb.PROPAGATION_PRIVATE),
        ("/expr", str(data / "x-from-env"), False, pb.PROPAGATION_PRIVATE),
        ("/etc/cfg", str(cm_dir), True, pb.PROPAGATION_PRIVATE),  # configMap: always read-only
    ]
    assert stat.S_IMODE(os.stat(data / "a" / "b").st_mode) == 0o750
    hosts = [m for m in setup.config.mounts if m.container_path == "/etc/hosts"]
    assert hosts and hosts[0].host_path == os.path.join(ctx.pod_dir("uid-1"), "etc-hosts")


def test_volume_mount_errors(ctx, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "escape").symlink_to("/etc")

    def attempt(mount, env=()):
        c = {"name": "c", "image": "i", "env": list(env), "volumeMounts": [mount]}
        with pytest.raises(PodConfigError) as err:
            build(make_pod([c], volumes=[{"name": "data", "emptyDir": {}}]), ctx, volume_paths={"data": str(data)})
        assert err.value.reason == "CreateContainerConfigError"
        return err.value.message

    assert attempt({"name": "other", "mountPath": "/x"}) == 'cannot find volume "other" to mount into container "c"'
    assert "must not be an absolute path" in attempt({"name": "data", "mountPath": "/x", "subPath": "/etc"})
    assert "must not contain '..'" in attempt({"name": "data", "mountPath": "/x", "subPath": "a/../../etc"})
    assert "failed to prepare subPath" in attempt({"name": "data", "mountPath": "/x", "subPath": "escape"})
    assert "failed to create subPath" in attempt({"name": "data", "mountPath": "/x", "subPath": "escape/newdir"})
    assert not os.path.exists("/etc/newdir")
    assert (
        attempt({"name": "data", "mountPath": "/x", "subPathExpr": "$(A)/$(B)"}, [{"name": "A", "value": ""}])
        == "missing value for A, B"
    )
    assert "invalid MountPropagation" in attempt({"name": "data", "mountPath": "/x", "mountPropagation": "Sideways"})


def test_etc_hosts(ctx):
    pod = make_pod(hostname="db-0", subdomain="db", hostAliases=[{"ip": "10.1.1.1", "hostnames": ["foo", "bar"]}])
    setup = build(pod, ctx, pod_ip="10.88.0.7", pod_ips=("10.88.0.7", "fd00::7"))
    path = os.path.join(ctx.pod_dir("uid-1"), "etc-hosts")
    text = open(path).read()
    assert text.startswith(names.MANAGED_HOSTS_HEADER + "127.0.0.1\tlocalhost\n")
    assert "10.88.0.7\tdb-0.db.ns1.svc.cluster.local\tdb-0\n" in text
    assert "fd00::7\tdb-0.db.ns1.svc.cluster.local\tdb-0\n" in text
    assert text.endswith("\n# Entries added by HostAliases.\n10.1.1.1\tfoo\tbar\n")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644
    assert any(m.container_path == "/etc/hosts" for m in setup.config.mounts)
    # No pod IP yet: no hosts file mount.
    assert not any(m.container_path == "/etc/hosts" for m in build(make_pod(), ctx, pod_ip="").config.mounts)
    host = build(make_pod(hostNetwork=True), ctx, pod_ip="192.168.1.5")
    assert open(path).read().startswith(names.MANAGED_HOSTS_HEADER_HOST_NETWORK)
    assert any(m.container_path == "/etc/hosts" for m in host.config.mounts)


def test_container_security_context(ctx):
    c = {
        "name": "c",
        "image": "i",
        "securityContext": {
            "privileged": True,
            "capabilities": {"add": ["NET_ADMIN"], "drop": ["ALL"]},
            "readOnlyRootFilesystem": True,
            "allowPrivilegeEscalation": False,
            "runAsGroup": 7,
        },
    }
    pod = make_pod(
        [c],
        securityContext={"runAsUser": 1000, "fsGroup": 2000, "supplementalGroups": [3000]},
        shareProcessNamespace=True,
    )
    sc = build(pod, ctx).config.linux.security_context
    assert sc.privileged and sc.readonly_rootfs and sc.no_new_privs
    assert list(sc.capabilities.add_capabilities) == ["NET_ADMIN"]
    assert list(sc.capabilities.drop_capabilities) == ["ALL"]
    assert sc.run_as_user.value == 1000 and sc.run_as_group.value == 7
    assert list(sc.supplemental_groups) == [2000, 3000]
    assert sc.namespace_options.pid == pb.POD
    assert "/proc/kcore" in sc.masked_paths and "/proc/sys" in sc.readonly_paths
    assert sc.seccomp.profile_type == pb.SecurityProfile.Unconfined
    plain = build(make_pod(), ctx).config.linux.security_context
    assert not plain.no_new_privs and not plain.HasField("capabilities")
    assert not plain.HasField("run_as_user")
    unmasked = make_pod([{"name": "c", "image": "i", "securityContext": {"procMount": "Unmasked"}}])
    assert list(build(unmasked, ctx).config.linux.security_context.masked_paths) == []
    # The image's user fills in when the pod names none.
    sc = build(make_pod(), ctx, image_uid=65534, image_username="").config.linux.security_context
    assert sc.run_as_user.value == 65534


def test_seccomp_precedence(ctx):
    def profile(pod_profile=None, container_profile=None, context=ctx):
        c = {"name": "c", "image": "i"}
        if container_profile:
            c["securityContext"] = {"seccompProfile": container_profile}
        pod = make_pod([c], securityContext={"seccompProfile": pod_profile} if pod_profile else {})
        p = build(pod, context).config.linux.security_context.seccomp
        return p.profile_type, p.localhost_ref

    assert profile() == (pb.SecurityProfile.Unconfined, "")
    defaulted = NodeContext(**{**ctx.__dict__, "seccomp_default": True})
    assert profile(context=defaulted) == (pb.SecurityProfile.RuntimeDefault, "")
    assert profile({"type": "RuntimeDefault"}) == (pb.SecurityProfile.RuntimeDefault, "")
    assert profile({"type": "RuntimeDefault"}, {"type": "Unconfined"}) == (pb.SecurityProfile.Unconfined, "")
    assert profile(None, {"type": "Localhost", "localhostProfile": "profiles/audit.json"}) == (
        pb.SecurityProfile.Localhost,
        os.path.join(ctx.root_dir, "seccomp", "profiles/audit.json"),
    )
    with pytest.raises(PodConfigError, match="localhostProfile must be set"):
        profile({"type": "Localhost"})


def test_run_as_non_root(ctx):
    def pod_with(sc):
        return make_pod([{"name": "c", "image": "i", "securityContext": sc}])

    with pytest.raises(PodConfigError) as err:
        build(pod_with({"runAsNonRoot": True, "runAsUser": 0}), ctx)
    assert "runAsUser breaks non-root policy" in err.value.message
    assert 'pod: "web_ns1(uid-1)", container: c' in err.value.message
    build(pod_with({"runAsNonRoot": True, "runAsUser": 1000}), ctx)
    build(pod_with({"runAsNonRoot": True}), ctx)  # image user unknown
    build(pod_with({"runAsNonRoot": True}), ctx, image_uid=1000)
    with pytest.raises(PodConfigError, match="image will run as root"):
        build(pod_with({"runAsNonRoot": True}), ctx, image_uid=0)
    with pytest.raises(PodConfigError, match=r"non-numeric user \(nobody\)"):
        build(pod_with({"runAsNonRoot": True}), ctx, image_username="nobody")
    # The pod-level setting applies to every container.
    pod = make_pod(securityContext={"runAsNonRoot": True})
    with pytest.raises(PodConfigError, match="image will run as root"):
        build(pod, ctx, image_uid=0)


# --- volumes -------------------------------------------------------------------------------------


def vm_pod(*volumes, uid="uid-1", containers=None):
    return make_pod(containers, uid=uid, volumes=list(volumes))


async def test_empty_dir_on_disk(ctx):
    vm = VolumeManager(ctx)
    old = os.umask(0o077)
    try:
        paths = await vm.setup(
            vm_pod({"name": "scratch", "emptyDir": {}}, {"name": "cache", "emptyDir": {"sizeLimit": "1Gi"}})
        )
    finally:
        os.umask(old)
    want = os.path.join(ctx.root_dir, "pods", "uid-1", "volumes", names.VOLUME_PLUGIN_EMPTY_DIR, "scratch")
    assert paths["scratch"] == want
    assert stat.S_IMODE(os.stat(want).st_mode) == 0o777
    assert vm.empty_dir_size_limits("uid-1") == {"cache": (paths["cache"], GiB)}
    # Idempotent: files survive a second set-up.
    open(os.path.join(want, "f"), "w").close()
    assert (
        await vm.setup(vm_pod({"name": "scratch", "emptyDir": {}}, {"name": "cache", "emptyDir": {"sizeLimit": "1Gi"}}))
        == paths
    )
    assert os.path.exists(os.path.join(want, "f"))
    await vm.teardown("uid-1")
    assert not os.path.exists(os.path.join(ctx.pod_dir("uid-1"), "volumes"))
    assert vm.empty_dir_size_limits("uid-1") == {}


@needs_root
async def test_empty_dir_memory_is_a_sized_tmpfs(ctx):
    vm = VolumeManager(ctx)
    pod = vm_pod(
        {"name": "mem", "emptyDir": {"medium": "Memory", "sizeLimit": "64Mi"}},
        {"name": "big", "emptyDir": {"medium": "Memory"}},
        containers=[{"name": "c", "image": "i", "resources": {"limits": {"memory": "256Mi", "cpu": "1"}}}],
    )
    try:
        paths = await vm.setup(pod)
        await vm.setup(pod)
        mounts = mount_points(ctx.pod_dir("uid-1"))
        assert mounts == {paths["mem"]: "tmpfs", paths["big"]: "tmpfs"}  # once each
        st = os.statvfs(paths["mem"])
        assert st.f_blocks * st.f_frsize == 64 * MiB
        st = os.statvfs(paths["big"])
        assert st.f_blocks * st.f_frsize == 256 * MiB  # the pod's limit
        with open(os.path.join(paths["mem"], "f"), "w") as fh:
            fh.write("in memory")
    finally:
        await vm.teardown("uid-1")
    assert mount_points(ctx.pod_dir("uid-1")) == {}
    assert not os.path.exists(paths["mem"])


async def test_host_path_types(ctx, tmp_path):
    vm = VolumeManager(ctx)

    async def setup(path, kind):
        return await vm.setup(vm_pod({"name": "h", "hostPath": {"path": str(path), "type": kind}}))

    async def failure(path, kind):
        with pytest.raises(PodConfigError) as err:
            await setup(path, kind)
        assert err.value.reason == "FailedMount"
        assert err.value.message.startswith('MountVolume.SetUp failed for volume "h" : ')
        return err.value.message.split(" : ", 1)[1]

    new_dir = tmp_path / "a" / "b" / "c"
    assert (await setup(new_dir, "DirectoryOrCreate"))["h"] == str(new_dir)
    assert stat.S_IMODE(os.stat(new_dir).st_mode) == 0o755
    new_file = tmp_path / "a" / "file"
    await setup(new_file, "FileOrCreate")
    assert new_file.is_file() and new_file.stat().st_size == 0
    assert stat.S_IMODE(new_file.stat().st_mode) == 0o644
    assert "no such file or directory" in await failure(tmp_path / "nope" / "file", "FileOrCreate")
    await setup(new_dir, "Directory")
    await setup(new_file, "File")
    await setup(new_file, "FileOrCreate")
    assert await failure(new_file, "Directory") == f"hostPath type check failed: {new_file} is not a directory"
    assert await failure(new_file, "DirectoryOrCreate") == f"hostPath type check failed: {new_file} is not a directory"
    assert await failure(new_dir, "File") == f"hostPath type check failed: {new_dir} is not a file"
    assert (
        await failure(tmp_path / "missing", "Directory")
        == f"hostPath type check failed: {tmp_path / 'missing'} is not a directory"
    )
    sock_path = tmp_path / "s.sock"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(sock_path))
        await setup(sock_path, "Socket")
    assert "is not a socket file" in await failure(new_file, "Socket")
    await setup("/dev/null", "CharDevice")
    assert "is not a block device" in await failure("/dev/null", "BlockDevice")
    assert "is not a character device" in await failure(new_file, "CharDevice")
    assert "must not contain '..'" in await failure(f"{tmp_path}/../x", "")
    assert (await setup(tmp_path / "whatever", ""))["h"] == str(tmp_path / "whatever")
    assert "Bogus is an invalid volume type" in await failure(new_dir, "Bogus")


async def test_object_volumes_need_objects(ctx):
    vm = VolumeManager(ctx)
    for volume in ({"name": "v", "configMap": {"name": "settings"}}, {"name": "v", "secret": {"secretName": "creds"}}):
        with pytest.raises(PodConfigError) as err:
            await vm.setup(vm_pod(volume))
        assert err.value.reason == "FailedMount"
        assert "need an API server connection" in err.value.message
    with pytest.raises(PodConfigError, match='volume type "nfs" is not supported'):
        await vm.setup(vm_pod({"name": "v", "nfs": {"server": "s", "path": "/"}}))


def read_volume(path):
    return {
        name: open(os.path.join(path, name)).read() for name in sorted(os.listdir(path)) if not name.startswith("..")
    }


async def test_configmap_volume_atomic_updates(ctx):
    objs = copy.deepcopy(OBJECTS)
    vm = VolumeManager(ctx, objects=Objects(objs))
    pod = vm_pod({"name": "cfg", "configMap": {"name": "settings", "defaultMode": 0o640}})
    path = (await vm.setup(pod))["cfg"]
    assert path == os.path.join(ctx.pod_dir("uid-1"), "volumes", names.VOLUME_PLUGIN_CONFIGMAP, "cfg")
    assert read_volume(path) == {"LEVEL": "3", "MODE": "fast", "bad key": "x", "blob": "bin"}
    assert os.readlink(os.path.join(path, "MODE")) == os.path.join(DATA_DIR_NAME, "MODE")
    data_dir = os.readlink(os.path.join(path, DATA_DIR_NAME))
    assert data_dir.startswith("..") and os.path.isdir(os.path.join(path, data_dir))
    assert stat.S_IMODE(os.stat(os.path.join(path, "MODE")).st_mode) == 0o640
    # Unchanged data: nothing rewritten.
    await vm.setup(pod)
    assert os.readlink(os.path.join(path, DATA_DIR_NAME)) == data_dir
    # Changed data: a new directory behind ..data, old names gone, old directory removed.
    objs[("ConfigMap", "ns1", "settings")] = {"data": {"MODE": "slow", "NEW": "1"}}
    await vm.setup(pod)
    assert read_volume(path) == {"MODE": "slow", "NEW": "1"}
    assert os.readlink(os.path.join(path, DATA_DIR_NAME)) != data_dir
    assert not os.path.exists(os.path.join(path, data_dir))
    assert sorted(e for e in os.listdir(path) if e.startswith("..")) == sorted(
        [DATA_DIR_NAME, os.readlink(os.path.join(path, DATA_DIR_NAME))]
    )
    # Items pick keys, paths and modes.
    items = vm_pod(
        {
            "name": "cfg",
            "configMap": {"name": "settings", "items": [{"key": "MODE", "path": "conf/mode.txt", "mode": 0o600}]},
        },
        uid="uid-2",
    )
    path2 = (await vm.setup(items))["cfg"]
    assert open(os.path.join(path2, "conf", "mode.txt")).read() == "slow"
    assert stat.S_IMODE(os.stat(os.path.join(path2, "conf", "mode.txt")).st_mode) == 0o600
    missing_key = vm_pod(
        {"name": "cfg", "configMap": {"name": "settings", "items": [{"key": "X", "path": "x"}]}}, uid="u3"
    )
    with pytest.raises(PodConfigError, match="configmap references non-existent config key: X"):
        await vm.setup(missing_key)
    with pytest.raises(PodConfigError, match='configmap "absent" not found'):
        await vm.setup(vm_pod({"name": "c", "configMap": {"name": "absent"}}, uid="u4"))
    path5 = (await vm.setup(vm_pod({"name": "c", "configMap": {"name": "absent", "optional": True}}, uid="u5")))["c"]
    assert read_volume(path5) == {}


async def test_refresh_updates_only_data_volumes_that_were_set_up(ctx, tmp_path):
    objs = copy.deepcopy(OBJECTS)
    vm = VolumeManager(ctx, objects=Objects(objs))
    fetched = []

    async def prefetch(pod):
        fetched.append(pod["metadata"]["uid"])

    vm.prefetch = prefetch
    pod = vm_pod({"name": "cfg", "configMap": {"name": "settings"}})
    pod["spec"]["volumes"].append({"name": "scratch", "emptyDir": {}})
    assert await vm.refresh(pod) == []  # never set up: nothing written
    assert not os.path.exists(os.path.join(ctx.pod_dir("uid-1"), "volumes"))
    paths = await vm.setup(pod)
    tmp_file = os.path.join(paths["scratch"], "keep")
    with open(tmp_file, "w") as f:
        f.write("x")
    assert await vm.refresh(pod) == []  # unchanged
    objs[("ConfigMap", "ns1", "settings")] = {"data": {"MODE": "slow"}}
    assert await vm.refresh(pod) == ["cfg"]
    assert read_volume(paths["cfg"]) == {"MODE": "slow"}
    assert open(tmp_file).read() == "x"  # emptyDir untouched
    assert fetched == ["uid-1"] * 4
    # The object is gone: FailedMount naming the volume, and the last content stays.
    del objs[("ConfigMap", "ns1", "settings")]
    with pytest.raises(PodConfigError, match='MountVolume.SetUp failed for volume "cfg"'):
        await vm.refresh(pod)
    assert read_volume(paths["cfg"]) == {"MODE": "slow"}
    # Pods without data volumes cost nothing.
    assert await vm.refresh(vm_pod({"name": "e", "emptyDir": {}}, uid="u9")) == []
    assert fetched == ["uid-1"] * 5


def test_atomic_write_rejects_bad_paths(tmp_path):
    for bad in ("/abs", "a/../../b", "..hidden"):
        with pytest.raises(Exception, match="invalid path"):
            atomic_write(str(tmp_path), {bad: (b"x", 0o644)})


@needs_root
async def test_secret_downward_and_projected_volumes(ctx):
    c = {"name": "c", "image": "i", "resources": {"limits": {"cpu": "500m", "memory": "32Mi"}}}
    vm = VolumeManager(ctx, objects=Objects(OBJECTS))
    pod = vm_pod(
        {"name": "sec", "secret": {"secretName": "creds", "defaultMode": 0o400}},
        {
            "name": "info",
            "downwardAPI": {
                "items": [
                    {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
                    {
                        "path": "cpu",
                        "resourceFieldRef": {"containerName": "c", "resource": "limits.cpu", "divisor": "1m"},
                    },
                ]
            },
        },
        {
            "name": "all",
            "projected": {
                "sources": [
                    {"secret": {"name": "creds", "items": [{"key": "USER", "path": "user"}]}},
                    {"configMap": {"name": "settings", "items": [{"key": "LEVEL", "path": "level"}]}},
                    {"downwardAPI": {"items": [{"path": "ns", "fieldRef": {"fieldPath": "metadata.namespace"}}]}},
                ]
            },
        },
        containers=[c],
    )
    try:
        paths = await vm.setup(pod)
        assert read_volume(paths["sec"]) == {"PASSWORD": "s3cret", "USER": "admin"}
        assert stat.S_IMODE(os.stat(os.path.join(paths["sec"], "USER")).st_mode) == 0o400
        assert read_volume(paths["info"]) == {"cpu": "500", "labels": 'app="web"'}
        assert read_volume(paths["all"]) == {"level": "3", "ns": "ns1", "user": "admin"}
        assert set(mount_points(ctx.pod_dir("uid-1")).values()) == {"tmpfs"}
        assert len(mount_points(ctx.pod_dir("uid-1"))) == 3
        # A changed label shows up on the next set-up.
        pod["metadata"]["labels"]["tier"] = "front"
        await vm.setup(pod)
        assert read_volume(paths["info"])["labels"] == 'app="web"\ntier="front"'
        token = vm_pod({"name": "t", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}, uid="u9")
        with pytest.raises(PodConfigError, match="TokenRequest"):
            await vm.setup(token)
        bad = vm_pod(
            {"name": "d", "downwardAPI": {"items": [{"path": "x", "fieldRef": {"fieldPath": "status.podIP"}}]}},
            uid="u10",
        )
        with pytest.raises(PodConfigError, match="unsupported fieldPath: status.podIP"):
            await vm.setup(bad)
    finally:
        for uid in ("uid-1", "u9", "u10"):
            await vm.remove_pod_dir(uid)
    assert mount_points(ctx.pod_dir("uid-1")) == {}


async def test_downward_api_volume_without_objects(ctx):
    vm = VolumeManager(ctx)
    paths = await vm.setup(
        vm_pod(
            {"name": "info", "downwardAPI": {"items": [{"path": "name", "fieldRef": {"fieldPath": "metadata.name"}}]}}
        )
    )
    try:
        assert read_volume(paths["info"]) == {"name": "web"}
    finally:
        await vm.remove_pod_dir("uid-1")


async def test_orphans_and_remove_pod_dir(ctx):
    vm = VolumeManager(ctx)
    assert vm.orphaned_pod_uids([]) == set()
    for uid in ("a", "b", "c"):
        await vm.setup(vm_pod({"name": "v", "emptyDir": {}}, uid=uid))
    open(os.path.join(ctx.root_dir, "pods", "stray-file"), "w").close()
    assert vm.orphaned_pod_uids(["b"]) == {"a", "c"}
    build(make_pod(uid="a"), ctx)  # a termination-message file in the pod dir
    await vm.teardown("a")
    assert os.path.isdir(ctx.pod_dir("a")) and not os.path.exists(os.path.join(ctx.pod_dir("a"), "volumes"))
    await vm.remove_pod_dir("a")
    await vm.remove_pod_dir("c")
    await vm.remove_pod_dir("never-existed")
    assert vm.orphaned_pod_uids(["b"]) == set()


# --- through the CRI ------------------------------------------------------------------------------


async def test_built_configs_are_accepted_by_the_runtime(ctx):
    c = full_container(
        image="orch.local/busybox:1",
        resources={"limits": {"cpu": "500m", "memory": "64Mi"}},
        volumeMounts=[{"name": "scratch", "mountPath": "/scratch"}],
    )
    pod = make_pod(
        [c],
        volumes=[{"name": "scratch", "emptyDir": {}}],
        securityContext={"sysctls": [{"name": "net.ipv4.tcp_syncookies", "value": "1"}]},
    )
    host_pod = make_pod(
        [{"name": "h", "image": "orch.local/busybox:1", "ports": [{"containerPort": 9100}]}],
        name="exporter",
        uid="uid-h",
        hostNetwork=True,
    )
    vm = VolumeManager(ctx)
    async with FakeRuntime() as fake, CriClient(fake.endpoint) as cri:
        for p in (pod, host_pod):
            sandbox_config = sandbox(p, ctx, cgroup_parent=f"/orchpods/pod{p['metadata']['uid']}")
            sandbox_id = await cri.run_pod_sandbox(sandbox_config)
            status = await cri.pod_sandbox_status(sandbox_id)
            pod_ip = status.status.network.ip
            assert bool(pod_ip) != bool(p["spec"].get("hostNetwork"))
            paths = await vm.setup(p)
            for cont in p["spec"]["containers"]:
                setup = build_container_config(
                    p, cont, ctx, restart_count=0, pod_ip=pod_ip or ctx.host_ip, volume_paths=paths
                )
                container_id = await cri.create_container(sandbox_id, setup.config, sandbox_config)
                await cri.start_container(container_id)
                got = await cri.container_status(container_id)
                assert got.status.state == pb.CONTAINER_RUNNING
                assert got.status.labels[names.CRI_LABEL_MANAGED] == "true"
                assert got.status.annotations[names.CRI_ANNOTATION_CONTAINER_HASH] == container_hash(cont)
                assert any(m.host_path == setup.termination_message_host_path for m in got.status.mounts)
        listed = await cri.list_pod_sandbox(label_selector={names.CRI_LABEL_MANAGED: "true"})
        assert sorted(s.metadata.name for s in listed) == ["exporter", "web"]
        stored = next(s for s in fake.sandboxes.values() if s.metadata.name == "web").config
        assert dict(stored.linux.sysctls) == {"net.ipv4.tcp_syncookies": "1"}
        assert stored.hostname == "web"
    for uid in ("uid-1", "uid-h"):
        await vm.remove_pod_dir(uid)


async def test_runtime_refuses_what_the_builder_prevents(ctx):
    """The fake runtime (like containerd) fails a host-network sandbox with a hostname;
    the builder never sends one."""
    host_pod = make_pod(hostNetwork=True, hostname="named")
    config = sandbox(host_pod, ctx)
    assert config.hostname == ""
    async with FakeRuntime() as fake, CriClient(fake.endpoint) as cri:
        await cri.run_pod_sandbox(config)
        broken = copy.deepcopy(config)
        broken.hostname = "named"
        broken.metadata.attempt = 1
        with pytest.raises(Exception, match="hostname"):
            await cri.run_pod_sandbox(broken)


# --- service environment variables ----------------------------------------------------------------


def _svc(name: str, namespace: str, ip: str, ports: list[dict]) -> dict:
    return {"metadata": {"name": name, "namespace": namespace}, "spec": {"clusterIP": ip, "ports": ports}}


SERVICES = [
    _svc("orch", "default", "10.96.0.1", [{"name": "https", "port": 443, "protocol": "TCP"}]),
    _svc(
        "my-db",
        "shop",
        "10.96.0.5",
        [{"name": "pg", "port": 5432, "protocol": "TCP"}, {"name": "stats-udp", "port": 9125, "protocol": "UDP"}],
    ),
    _svc("v6", "shop", "fd00::10", [{"port": 80}]),
    _svc("headless", "shop", "None", [{"port": 80}]),
    _svc("pending", "shop", "", [{"port": 80}]),
    _svc("other", "elsewhere", "10.96.0.9", [{"port": 80}]),
]


def test_service_variables_are_rendered_as_upstream():
    env = service_environment(SERVICES, "shop", True)
    assert env == {
        "ORCH_SERVICE_HOST": "10.96.0.1",
        "ORCH_SERVICE_PORT": "443",
        "ORCH_SERVICE_PORT_HTTPS": "443",
        "ORCH_PORT": "tcp://10.96.0.1:443",
        "ORCH_PORT_443_TCP": "tcp://10.96.0.1:443",
        "ORCH_PORT_443_TCP_PROTO": "tcp",
        "ORCH_PORT_443_TCP_PORT": "443",
        "ORCH_PORT_443_TCP_ADDR": "10.96.0.1",
        "MY_DB_SERVICE_HOST": "10.96.0.5",
        "MY_DB_SERVICE_PORT": "5432",
        "MY_DB_SERVICE_PORT_PG": "5432",
        "MY_DB_SERVICE_PORT_STATS_UDP": "9125",
        "MY_DB_PORT": "tcp://10.96.0.5:5432",
        "MY_DB_PORT_5432_TCP": "tcp://10.96.0.5:5432",
        "MY_DB_PORT_5432_TCP_PROTO": "tcp",
        "MY_DB_PORT_5432_TCP_PORT": "5432",
        "MY_DB_PORT_5432_TCP_ADDR": "10.96.0.5",
        "MY_DB_PORT_9125_UDP": "udp://10.96.0.5:9125",
        "MY_DB_PORT_9125_UDP_PROTO": "udp",
        "MY_DB_PORT_9125_UDP_PORT": "9125",
        "MY_DB_PORT_9125_UDP_ADDR": "10.96.0.5",
        "V6_SERVICE_HOST": "fd00::10",
        "V6_SERVICE_PORT": "80",
        "V6_PORT": "tcp://[fd00::10]:80",
        "V6_PORT_80_TCP": "tcp://[fd00::10]:80",
        "V6_PORT_80_TCP_PROTO": "tcp",
        "V6_PORT_80_TCP_PORT": "80",
        "V6_PORT_80_TCP_ADDR": "fd00::10",
    }


def test_without_service_links_only_the_orch_service_is_given():
    env = service_environment(SERVICES, "shop", False)
    assert sorted(env) == [
        "ORCH_PORT",
        "ORCH_PORT_443_TCP",
        "ORCH_PORT_443_TCP_ADDR",
        "ORCH_PORT_443_TCP_PORT",
        "ORCH_PORT_443_TCP_PROTO",
        "ORCH_SERVICE_HOST",
        "ORCH_SERVICE_PORT",
        "ORCH_SERVICE_PORT_HTTPS",
    ]
    # A Service of the pod's own namespace named like the orch Service wins over it.
    own = _svc("orch", "shop", "10.96.7.7", [{"port": 81}])
    assert service_environment([*SERVICES, own], "shop", True)["ORCH_SERVICE_HOST"] == "10.96.7.7"
    assert service_environment([own, *SERVICES], "shop", True)["ORCH_SERVICE_HOST"] == "10.96.7.7"


def test_service_variables_come_last_and_lose_to_the_containers_own(ctx):
    c = {
        "name": "c",
        "image": "busybox",
        "env": [
            {"name": "MY_DB_SERVICE_HOST", "value": "mine"},
            {"name": "DSN", "value": "postgres://$(MY_DB_SERVICE_HOST):$(MY_DB_SERVICE_PORT)/x"},
        ],
    }
    pod = make_pod([c])
    pod["metadata"]["namespace"] = "shop"
    services = service_environment(SERVICES, "shop", True)
    env = make_environment(pod, c, ctx, pod_ip="", pod_ips=(), objects=None, service_env=services)
    assert env[:2] == [("MY_DB_SERVICE_HOST", "mine"), ("DSN", "postgres://mine:5432/x")]
    rest = dict(env[2:])
    assert "MY_DB_SERVICE_HOST" not in rest and rest["MY_DB_SERVICE_PORT"] == "5432"
    assert [k for k, _ in env[2:]] == sorted(rest)
