"""The small admission plugins, on request attributes: AlwaysAdmit, AlwaysDeny,
AlwaysPullImages, SecurityContextDeny, LimitPodHardAntiAffinityTopology,
ExtendedResourceToleration, PodNodeSelector, PodTolerationRestriction, and the
toleration arithmetic they share; PodSecurity's warnings and audit annotations
reach the request's record."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest

from apiserver_min.admission import tolerations
from apiserver_min.admission.chain import Attributes, begin_request, end_request
from apiserver_min.admission.plugins.alwaysadmit import AlwaysAdmit
from apiserver_min.admission.plugins.alwaysdeny import AlwaysDeny
from apiserver_min.admission.plugins.alwayspullimages import AlwaysPullImages
from apiserver_min.admission.plugins.antiaffinity import LimitPodHardAntiAffinityTopology
from apiserver_min.admission.plugins.extendedresourcetoleration import ExtendedResourceToleration
from apiserver_min.admission.plugins.podnodeselector import PodNodeSelector, parse_selector
from apiserver_min.admission.plugins.podsecurity import PodSecurity
from apiserver_min.admission.plugins.podtolerationrestriction import PodTolerationRestriction
from apiserver_min.admission.plugins.podtolerationrestriction import parse_configuration as ptr_config
from apiserver_min.admission.plugins.securitycontextdeny import SecurityContextDeny
from apiserver_min.admission.podsecurity.policy import parse_configuration as ps_config
from apiserver_min.api import names
from apiserver_min.api import status as st
from apiserver_min.api.kinds import REGISTRY
from apiserver_min.api.user import UserInfo

PODS = REGISTRY.by_resource("", "v1", "pods")
DEPLOYMENTS = REGISTRY.by_resource("apps", "v1", "deployments")
CONFIGMAPS = REGISTRY.by_resource("", "v1", "configmaps")
USER = UserInfo("alice")


def attrs(obj, op="CREATE", old=None, kind=PODS, ns="team", name="p", user=USER) -> Attributes:
    return Attributes(op, kind, ns, name, "", obj, old, user, False)


def pod(**spec) -> dict:
    return {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "a"}], **spec}}


class FakeLookup:
    """Namespaces by name, as the plugins' lookup answers them."""

    def __init__(self, namespaces: dict[str, dict]):
        self.namespaces = namespaces

    async def get(self, resource, namespace, name):
        assert resource == "namespaces"
        return self.namespaces.get(name)

    async def live(self, resource, namespace, name):
        return await self.get(resource, namespace, name)

    def cached(self, resource, namespace, name):
        """The watch-cache entry's view: the labels, not the decoded object."""
        assert resource == "namespaces"
        ns = self.namespaces.get(name)
        return None if ns is None else SimpleNamespace(labels=ns["metadata"].get("labels") or {})


def with_namespace(plugin, labels=None, annotations=None, name="team"):
    plugin._lookup = FakeLookup(
        {name: {"metadata": {"name": name, "labels": labels or {}, "annotations": annotations or {}}}}
    )
    return plugin


async def test_always_admit_and_always_deny():
    a = attrs({"metadata": {"name": "cm"}}, kind=CONFIGMAPS, name="cm")
    await AlwaysAdmit().admit(a)
    await AlwaysAdmit().validate(a)
    with pytest.raises(st.ApiError) as exc:
        await AlwaysDeny().validate(a)
    assert exc.value.code == 403
    assert exc.value.message == 'configmaps "cm" is forbidden: admission control is denying all modifications'


async def test_always_pull_images_sets_every_container_and_refuses_others_in_validation():
    p = pod(
        initContainers=[{"name": "i", "image": "b", "imagePullPolicy": "Never"}],
        ephemeralContainers=[{"name": "d", "image": "c"}],
    )
    plugin = AlwaysPullImages()
    await plugin.admit(attrs(p))
    spec = p["spec"]
    assert {
        c["imagePullPolicy"] for c in spec["initContainers"] + spec["containers"] + spec["ephemeralContainers"]
    } == {"Always"}
    bad = pod()
    bad["spec"]["containers"][0]["imagePullPolicy"] = "IfNotPresent"
    with pytest.raises(st.ApiError) as exc:
        await plugin.validate(attrs(bad))
    assert exc.value.message == (
        'pods "p" is forbidden: spec.containers[0].imagePullPolicy: Unsupported value: "IfNotPresent": '
        'supported values: "Always"'
    )
    # An update bringing no new image is left alone.
    await plugin.validate(attrs(bad, op="UPDATE", old=copy.deepcopy(bad)))


@pytest.mark.parametrize(
    "spec, message",
    [
        ({"securityContext": {"supplementalGroups": [1]}}, "pod.Spec.SecurityContext.SupplementalGroups is forbidden"),
        (
            {"securityContext": {"seLinuxOptions": {"type": "t"}}},
            "pod.Spec.SecurityContext.SELinuxOptions is forbidden",
        ),
        ({"securityContext": {"runAsUser": 1}}, "pod.Spec.SecurityContext.RunAsUser is forbidden"),
        ({"securityContext": {"fsGroup": 1}}, "pod.Spec.SecurityContext.FSGroup is forbidden"),
        (
            {"containers": [{"name": "c", "image": "a", "securityContext": {"runAsUser": 0}}]},
            "SecurityContext.RunAsUser is forbidden",
        ),
        (
            {"initContainers": [{"name": "i", "image": "a", "securityContext": {"seLinuxOptions": {}}}]},
            "SecurityContext.SELinuxOptions is forbidden",
        ),
    ],
)
async def test_security_context_deny(spec, message):
    with pytest.raises(st.ApiError) as exc:
        await SecurityContextDeny().validate(attrs(pod(**spec)))
    assert exc.value.message == f'pods "p" is forbidden: {message}'


async def test_security_context_deny_passes_other_fields():
    await SecurityContextDeny().validate(attrs(pod(securityContext={"runAsNonRoot": True})))


async def test_hard_anti_affinity_only_on_the_hostname_key():
    def anti(key):
        term = {"labelSelector": {"matchLabels": {"a": "b"}}, "topologyKey": key}
        return pod(affinity={"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}})

    plugin = LimitPodHardAntiAffinityTopology()
    await plugin.validate(attrs(anti(names.LABEL_HOSTNAME)))
    with pytest.raises(st.ApiError) as exc:
        await plugin.validate(attrs(anti(names.LABEL_ZONE)))
    assert exc.value.message == (
        f'pods "p" is forbidden: affinity.PodAntiAffinity.RequiredDuringScheduling has TopologyKey {names.LABEL_ZONE} '
        f"but only key {names.LABEL_HOSTNAME} is allowed"
    )


async def test_extended_resource_toleration():
    p = pod()
    p["spec"]["containers"][0]["resources"] = {
        "requests": {"example.com/gpu": "1", "cpu": "1", f"{names.DOMAIN}/x": "1"}
    }
    p["spec"]["initContainers"] = [{"name": "i", "image": "a", "resources": {"requests": {"example.com/fpga": "1"}}}]
    p["spec"]["tolerations"] = [{"key": "example.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    await ExtendedResourceToleration().admit(attrs(p))
    assert p["spec"]["tolerations"] == [
        {"key": "example.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "example.com/fpga", "operator": "Exists", "effect": "NoSchedule"},
    ]


def test_selector_parsing():
    assert parse_selector("a=b, c = d") == {"a": "b", "c": "d"}
    assert parse_selector("") == {}
    with pytest.raises(ValueError, match=r"invalid selector: \[a\]"):
        parse_selector("a")


async def test_pod_node_selector_whitelist_and_cluster_default():
    selectors = {"clusterDefaultNodeSelector": {"zone": "z1"}, "team": {"zone": "z1", "disk": "ssd"}}
    plugin = with_namespace(PodNodeSelector(None, selectors))
    p = pod(nodeSelector={"disk": "ssd"})
    await plugin.admit(attrs(p))
    assert p["spec"]["nodeSelector"] == {"zone": "z1", "disk": "ssd"}
    await plugin.validate(attrs(p))
    outside = pod(nodeSelector={"disk": "hdd2", "zone": "z1"})
    outside["spec"]["nodeSelector"]["gpu"] = "yes"
    with pytest.raises(st.ApiError) as exc:
        await plugin.validate(attrs(outside))
    assert (
        exc.value.message
        == 'pods "p" is forbidden: pod node label selector labels conflict with its namespace whitelist'
    )


async def test_pod_toleration_restriction_defaults_and_whitelist():
    default, whitelist = ptr_config(
        {
            "apiVersion": f"{names.POD_TOLERATION_RESTRICTION_CONFIG_GROUP}/v1alpha1",
            "kind": "Configuration",
            "default": [{"key": "team", "operator": "Equal", "value": "a", "effect": "NoSchedule"}],
            "whitelist": [{"key": "team", "operator": "Exists"}],
        }
    )
    plugin = with_namespace(PodTolerationRestriction(None, default, whitelist))
    p = pod()
    await plugin.admit(attrs(p))
    assert p["spec"]["tolerations"] == [{"key": "team", "operator": "Equal", "value": "a", "effect": "NoSchedule"}]
    await plugin.validate(attrs(p))
    other = pod(tolerations=[{"key": "gpu", "operator": "Exists"}])
    with pytest.raises(st.ApiError) as exc:
        await plugin.validate(attrs(other))
    assert exc.value.code == 500
    assert exc.value.message == (
        "pod tolerations (possibly merged with namespace default tolerations) conflict with its cluster whitelist"
    )
    # The namespace's annotations win over the cluster's configuration.
    ns_plugin = with_namespace(
        PodTolerationRestriction(None, default, whitelist),
        annotations={
            names.ANNOTATION_DEFAULT_TOLERATIONS: '[{"key": "ns", "operator": "Exists", "effect": "NoExecute"}]',
            names.ANNOTATION_TOLERATIONS_WHITELIST: '[{"operator": "Exists"}]',
        },
    )
    burstable = pod()
    burstable["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "100m"}}
    await ns_plugin.admit(attrs(burstable))
    assert burstable["spec"]["tolerations"] == [
        {"key": "ns", "operator": "Exists", "effect": "NoExecute"},
        {"key": names.TAINT_MEMORY_PRESSURE, "operator": "Exists", "effect": "NoSchedule"},
    ]
    await ns_plugin.validate(attrs(other))
    with pytest.raises(ValueError, match="expected kind Configuration"):
        ptr_config({"kind": "Other"})


def test_toleration_merge_keeps_only_supersets():
    exists_all = {"key": "a", "operator": "Exists"}
    equal = {"key": "a", "operator": "Equal", "value": "v", "effect": "NoSchedule"}
    assert tolerations.merge([equal], [exists_all]) == [exists_all]
    assert tolerations.merge([exists_all], [equal]) == [exists_all]
    timed = {"key": "n", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 10}
    longer = {**timed, "tolerationSeconds": 60}
    assert tolerations.is_superset(longer, timed) and not tolerations.is_superset(timed, longer)
    assert tolerations.allowed_by([equal], [{"operator": "Exists"}])
    assert not tolerations.allowed_by([equal], [{"key": "b", "operator": "Exists"}])


async def test_pod_security_records_warnings_and_audit_annotations():
    config = ps_config(
        {
            "apiVersion": f"{names.POD_SECURITY_CONFIG_GROUP}/v1",
            "kind": "PodSecurityConfiguration",
            "exemptions": {"runtimeClasses": ["kata"]},
        }
    )
    labels = {names.POD_SECURITY_PREFIX + "warn": "baseline", names.POD_SECURITY_PREFIX + "audit": "restricted"}
    plugin = with_namespace(PodSecurity(SimpleNamespace(), config), labels=labels)
    record, token = begin_request()
    try:
        await plugin.validate(attrs(pod(hostPID=True)))
    finally:
        end_request(token)
    assert record.warnings == ['would violate PodSecurity "baseline:latest": host namespaces (hostPID=true)']
    assert record.audit_annotations[names.POD_SECURITY_PREFIX + "enforce-policy"] == "privileged:latest"
    assert record.audit_annotations[names.POD_SECURITY_PREFIX + "audit-violations"].startswith(
        'would violate PodSecurity "restricted:latest": host namespaces (hostPID=true), allowPrivilegeEscalation'
    )
    # A pod controller's template gets the warning too, and is never refused.
    enforcing = with_namespace(
        PodSecurity(SimpleNamespace(), config), labels={names.POD_SECURITY_PREFIX + "enforce": "restricted"}
    )
    deployment = {"metadata": {"name": "d"}, "spec": {"template": {"metadata": {}, "spec": pod(hostPID=True)["spec"]}}}
    record, token = begin_request()
    try:
        await enforcing.validate(attrs(deployment, kind=DEPLOYMENTS, name="d"))
    finally:
        end_request(token)
    assert record.warnings and record.warnings[0].startswith(
        'would violate PodSecurity "restricted:latest": host namespaces'
    )
    # An exempt runtime class passes enforcement.
    await enforcing.validate(attrs(pod(hostPID=True, runtimeClassName="kata")))
    with pytest.raises(st.ApiError):
        await enforcing.validate(attrs(pod(hostPID=True)))


async def test_pod_security_exempt_namespaces_pass_and_their_labels_draw_a_warning():
    config = ps_config(
        {
            "apiVersion": f"{names.POD_SECURITY_CONFIG_GROUP}/v1",
            "kind": "PodSecurityConfiguration",
            "exemptions": {"namespaces": ["ops"]},
        }
    )
    restricted = {names.POD_SECURITY_PREFIX + "enforce": "restricted"}
    plugin = with_namespace(PodSecurity(SimpleNamespace(), config), labels=restricted, name="ops")
    record, token = begin_request()
    try:
        await plugin.validate(attrs(pod(hostPID=True), ns="ops"))
        namespaces = REGISTRY.by_resource("", "v1", "namespaces")
        ns_obj = {"metadata": {"name": "ops", "labels": restricted}}
        await plugin.validate(attrs(ns_obj, kind=namespaces, ns="", name="ops"))
    finally:
        end_request(token)
    assert record.audit_annotations == {names.POD_SECURITY_PREFIX + "exempt": "namespace"}
    assert record.warnings == [
        'namespace "ops" is exempt from Pod Security, and the policy (enforce=restricted:latest) will be ignored'
    ]
