"""The Pod Security Standards' checks (baseline and restricted, by policy version), the
namespace labels read as a policy, and the PodSecurity plugin's configuration."""

from __future__ import annotations

import pytest

from apiserver_min.admission.plugins.podsecurity import is_significant_pod_update
from apiserver_min.admission.podsecurity import checks
from apiserver_min.admission.podsecurity.policy import (
    LevelVersion,
    Policy,
    parse_configuration,
    policy_from_labels,
)
from apiserver_min.api import names

RESTRICTED_OK_SC = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "runAsNonRoot": True,
    "seccompProfile": {"type": "RuntimeDefault"},
}


def spec(**container_sc) -> dict:
    """A pod spec with one container "c" whose securityContext passes restricted, changed by CONTAINER_SC."""
    sc = {**RESTRICTED_OK_SC, **container_sc}
    return {"containers": [{"name": "c", "image": "i", "securityContext": {k: v for k, v in sc.items() if v != ...}}]}


def detail(level: str, pod_spec: dict, meta: dict | None = None, version=None) -> str:
    return checks.forbidden_detail(checks.evaluate(level, version, meta or {}, pod_spec))


def test_a_pod_passing_restricted_passes_every_level():
    for level in ("privileged", "baseline", "restricted"):
        assert checks.evaluate(level, None, {}, spec()) == []


def test_restricted_lists_every_violation_of_a_privileged_pod_in_upstreams_order():
    pod = {"hostNetwork": True, "containers": [{"name": "x", "image": "i", "securityContext": {"privileged": True}}]}
    assert detail("restricted", pod) == (
        "host namespaces (hostNetwork=true), "
        'privileged (container "x" must not set securityContext.privileged=true), '
        'allowPrivilegeEscalation != false (container "x" must set securityContext.allowPrivilegeEscalation=false), '
        'unrestricted capabilities (container "x" must set securityContext.capabilities.drop=["ALL"]), '
        'runAsNonRoot != true (pod or container "x" must set securityContext.runAsNonRoot=true), '
        'seccompProfile (pod or container "x" must set securityContext.seccompProfile.type to '
        '"RuntimeDefault" or "Localhost")'
    )
    assert detail("baseline", pod) == (
        'host namespaces (hostNetwork=true), privileged (container "x" must not set securityContext.privileged=true)'
    )
    assert checks.evaluate("privileged", None, {}, pod) == []


# --- baseline, one check each --------------------------------------------------------


@pytest.mark.parametrize(
    "pod_spec, meta, expected",
    [
        (
            {**spec(), "hostPID": True, "hostIPC": True},
            {},
            "host namespaces (hostPID=true, hostIPC=true)",
        ),
        (spec(privileged=True), {}, 'privileged (container "c" must not set securityContext.privileged=true)'),
        (
            spec(capabilities={"add": ["NET_ADMIN", "CHOWN", "SYS_TIME"]}),
            {},
            'non-default capabilities (container "c" must not include "NET_ADMIN", "SYS_TIME" in '
            "securityContext.capabilities.add)",
        ),
        (
            {**spec(), "volumes": [{"name": "h", "hostPath": {"path": "/"}}, {"name": "e", "emptyDir": {}}]},
            {},
            'hostPath volumes (volume "h")',
        ),
        (
            {
                "containers": [
                    {"name": "a", "image": "i", "ports": [{"containerPort": 80, "hostPort": 8080}]},
                    {"name": "b", "image": "i", "ports": [{"containerPort": 81, "hostPort": 9090}]},
                ]
            },
            {},
            'hostPort (containers "a", "b" use hostPorts 8080, 9090)',
        ),
        (
            spec(procMount="Unmasked"),
            {},
            'procMount (container "c" must not set securityContext.procMount to "Unmasked")',
        ),
        (
            {**spec(), "securityContext": {"seLinuxOptions": {"type": "spc_t", "user": "u"}}},
            {},
            'seLinuxOptions (pod set forbidden securityContext.seLinuxOptions: type "spc_t"; user may not be set)',
        ),
        (
            spec(seccompProfile={"type": "Unconfined"}),
            {},
            'seccompProfile (container "c" must not set securityContext.seccompProfile.type to "Unconfined")',
        ),
        (
            {**spec(), "securityContext": {"sysctls": [{"name": "kernel.msgmax", "value": "1"}]}},
            {},
            "forbidden sysctls (kernel.msgmax)",
        ),
        (
            spec(windowsOptions={"hostProcess": True}),
            {},
            'hostProcess (container "c" must not set securityContext.windowsOptions.hostProcess=true)',
        ),
        (
            spec(),
            {"annotations": {names.ANNOTATION_APPARMOR_CONTAINER_PREFIX + "c": "unconfined"}},
            f'forbidden AppArmor profile ({names.ANNOTATION_APPARMOR_CONTAINER_PREFIX}c="unconfined")',
        ),
    ],
    ids=[
        "hostNamespaces",
        "privileged",
        "capabilities",
        "hostPath",
        "hostPorts",
        "procMount",
        "seLinuxOptions",
        "seccomp",
        "sysctls",
        "windowsHostProcess",
        "appArmor",
    ],
)
def test_baseline_check(pod_spec, meta, expected):
    assert detail("baseline", pod_spec, meta) == expected


def test_baseline_allows_what_only_restricted_refuses():
    # Default capabilities, any volume type but hostPath, root, no seccomp profile.
    pod = {
        "containers": [
            {"name": "c", "image": "i", "securityContext": {"runAsUser": 0, "capabilities": {"add": ["KILL"]}}}
        ],
        "volumes": [{"name": "n", "nfs": {"server": "s", "path": "/"}}],
        "securityContext": {"sysctls": [{"name": "net.ipv4.ip_local_port_range", "value": "1 2"}]},
    }
    assert checks.evaluate("baseline", None, {}, pod) == []
    reasons = [v.reason for v in checks.evaluate("restricted", None, {}, pod)]
    assert reasons == [
        "allowPrivilegeEscalation != false",
        "unrestricted capabilities",
        "restricted volume types",
        "runAsNonRoot != true",
        "runAsUser=0",
        "seccompProfile",
    ]


def test_sysctl_ip_local_reserved_ports_is_allowed_from_policy_version_1_27():
    pod = {**spec(), "securityContext": {"sysctls": [{"name": "net.ipv4.ip_local_reserved_ports", "value": "1"}]}}
    assert checks.evaluate("baseline", None, {}, pod) == []
    assert checks.evaluate("baseline", (1, 27), {}, pod) == []
    assert detail("baseline", pod, version=(1, 26)) == "forbidden sysctls (net.ipv4.ip_local_reserved_ports)"


def test_apparmor_runtime_default_and_localhost_profiles_pass():
    meta = {
        "annotations": {
            names.ANNOTATION_APPARMOR_CONTAINER_PREFIX + "a": "runtime/default",
            names.ANNOTATION_APPARMOR_CONTAINER_PREFIX + "b": "localhost/mine",
        }
    }
    assert checks.evaluate("baseline", None, meta, spec()) == []


def test_selinux_allowed_types_pass_and_role_is_refused_for_containers():
    ok = {**spec(), "securityContext": {"seLinuxOptions": {"type": "container_init_t", "level": "s0"}}}
    assert checks.evaluate("baseline", None, {}, ok) == []
    assert detail("baseline", spec(seLinuxOptions={"role": "r"})) == (
        'seLinuxOptions (container "c" set forbidden securityContext.seLinuxOptions: role may not be set)'
    )


def test_seccomp_annotations_are_checked_before_policy_version_1_19():
    meta = {"annotations": {names.ANNOTATION_SECCOMP_POD: "unconfined"}}
    assert detail("baseline", spec(), meta, version=(1, 18)) == (
        f'seccompProfile (forbidden annotation {names.ANNOTATION_SECCOMP_POD}="unconfined")'
    )
    assert checks.evaluate("baseline", None, meta, spec()) == []


# --- restricted, one check each ------------------------------------------------------


@pytest.mark.parametrize(
    "pod_spec, expected",
    [
        (
            spec(allowPrivilegeEscalation=True),
            'allowPrivilegeEscalation != false (container "c" must set securityContext.allowPrivilegeEscalation=false)',
        ),
        (
            spec(capabilities={"drop": ["ALL"], "add": ["NET_BIND_SERVICE", "CHOWN"]}),
            'unrestricted capabilities (container "c" must not include "CHOWN" in securityContext.capabilities.add)',
        ),
        (
            spec(capabilities={"drop": ["NET_RAW"]}),
            'unrestricted capabilities (container "c" must set securityContext.capabilities.drop=["ALL"])',
        ),
        (
            {
                **spec(),
                "volumes": [{"name": "h", "hostPath": {"path": "/"}}, {"name": "g", "gitRepo": {"repository": "r"}}],
            },
            'restricted volume types (volumes "h", "g" use restricted volume types "gitRepo", "hostPath")',
        ),
        (
            spec(runAsNonRoot=False),
            'runAsNonRoot != true (container "c" must not set securityContext.runAsNonRoot=false)',
        ),
        (
            {**spec(runAsUser=0), "securityContext": {"runAsUser": 0}},
            'runAsUser=0 (pod and container "c" must not set runAsUser=0)',
        ),
        (
            {**spec(seccompProfile=...), "securityContext": {"seccompProfile": {"type": "Unconfined"}}},
            'seccompProfile (pod must not set securityContext.seccompProfile.type to "Unconfined")',
        ),
    ],
    ids=[
        "allowPrivilegeEscalation",
        "capabilities-add",
        "capabilities-drop",
        "volumes",
        "runAsNonRoot",
        "runAsUser",
        "seccomp",
    ],
)
def test_restricted_check(pod_spec, expected):
    assert detail("restricted", pod_spec) == expected


def test_pod_level_settings_cover_containers_for_run_as_non_root_and_seccomp():
    pod = {
        "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "Localhost", "localhostProfile": "p"}},
        "initContainers": [
            {
                "name": "init",
                "image": "i",
                "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
            }
        ],
        "containers": [
            {
                "name": "c",
                "image": "i",
                "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
            }
        ],
    }
    assert checks.evaluate("restricted", None, {}, pod) == []


def test_ephemeral_containers_are_checked_too():
    pod = {**spec(), "ephemeralContainers": [{"name": "debug", "image": "i", "securityContext": {"privileged": True}}]}
    assert detail("baseline", pod) == 'privileged (container "debug" must not set securityContext.privileged=true)'


def test_older_policy_versions_evaluate_the_checks_of_their_time():
    pod = {"containers": [{"name": "c", "image": "i"}]}
    # Before 1.8 there is no allowPrivilegeEscalation check, before 1.19 no seccomp profile
    # requirement, before 1.22 no capabilities drop, before 1.23 no runAsUser check.
    assert [v.reason for v in checks.evaluate("restricted", (1, 7), {}, pod)] == ["runAsNonRoot != true"]
    assert [v.reason for v in checks.evaluate("restricted", (1, 21), {}, pod)] == [
        "allowPrivilegeEscalation != false",
        "runAsNonRoot != true",
        "seccompProfile",
    ]
    # Below 1.22 the baseline capabilities check applies to restricted namespaces.
    adds = spec(capabilities={"add": ["NET_ADMIN"]})
    assert [v.reason for v in checks.evaluate("restricted", (1, 21), {}, adds)] == ["non-default capabilities"]
    # Versions after the newest check evaluate like latest.
    assert checks.evaluate("restricted", (1, 40), {}, pod) == checks.evaluate("restricted", None, {}, pod)


def test_windows_pods_are_exempt_from_linux_only_checks_from_1_25():
    pod = {
        "os": {"name": "windows"},
        "securityContext": {"runAsNonRoot": True},
        "containers": [{"name": "c", "image": "i"}],
    }
    assert checks.evaluate("restricted", None, {}, pod) == []
    assert [v.reason for v in checks.evaluate("restricted", (1, 24), {}, pod)] == [
        "allowPrivilegeEscalation != false",
        "unrestricted capabilities",
        "seccompProfile",
    ]


# --- namespace labels and configuration ----------------------------------------------


def label(mode: str) -> str:
    return names.POD_SECURITY_PREFIX + mode


def test_labels_choose_levels_and_versions_per_mode():
    policy, errs = policy_from_labels(
        {label("enforce"): "baseline", label("warn"): "restricted", label("warn-version"): "v1.24"}, Policy()
    )
    assert errs == []
    assert str(policy.enforce) == "baseline:latest"
    assert str(policy.warn) == "restricted:v1.24"
    assert str(policy.audit) == "privileged:latest"


def test_bad_label_values_are_errors_enforce_failing_closed_audit_and_warn_open():
    policy, errs = policy_from_labels(
        {label("enforce"): "strict", label("warn"): "nope", label("audit-version"): "1.25"}, Policy()
    )
    assert [e.message() for e in errs] == [
        f'metadata.labels[{label("enforce")}]: Invalid value: "strict": must be one of privileged, baseline, restricted',
        f'metadata.labels[{label("audit-version")}]: Invalid value: "1.25": must be "latest" or "v1.x"',
        f'metadata.labels[{label("warn")}]: Invalid value: "nope": must be one of privileged, baseline, restricted',
    ]
    assert policy.enforce.level == "restricted"
    assert policy.warn.level == "privileged"


def test_configuration_defaults_and_exemptions():
    config = parse_configuration(
        {
            "apiVersion": f"{names.POD_SECURITY_CONFIG_GROUP}/v1",
            "kind": "PodSecurityConfiguration",
            "defaults": {"enforce": "baseline", "enforce-version": "v1.26", "warn": "restricted"},
            "exemptions": {"usernames": ["ci"], "namespaces": ["ops"], "runtimeClasses": ["kata"]},
        }
    )
    assert config.defaults.enforce == LevelVersion("baseline", (1, 26))
    assert config.defaults.warn == LevelVersion("restricted", None)
    assert config.exempt_usernames == {"ci"} and config.exempt_namespaces == {"ops"}
    assert config.exempt_runtime_classes == {"kata"}
    assert parse_configuration(None).defaults.fully_privileged()


def test_configuration_errors_name_the_field():
    with pytest.raises(ValueError) as exc:
        parse_configuration(
            {
                "apiVersion": f"{names.POD_SECURITY_CONFIG_GROUP}/v1",
                "kind": "PodSecurityConfiguration",
                "defaults": {"enforce": "high"},
                "exemptions": {"usernames": ["a", "a"], "namespaces": ["Bad_NS"]},
            }
        )
    text = str(exc.value)
    assert 'defaults.enforce: Invalid value: "high": must be one of privileged, baseline, restricted' in text
    assert 'exemptions.usernames[1]: Duplicate value: "a"' in text
    assert 'exemptions.namespaces[0]: Invalid value: "Bad_NS"' in text
    with pytest.raises(ValueError, match="unknown field"):
        parse_configuration(
            {"apiVersion": f"{names.POD_SECURITY_CONFIG_GROUP}/v1", "kind": "PodSecurityConfiguration", "extra": 1}
        )
    with pytest.raises(ValueError, match="expected kind PodSecurityConfiguration"):
        parse_configuration({"kind": "Other"})


def test_only_significant_pod_updates_are_checked_again():
    old = {
        "metadata": {"labels": {}},
        "spec": {"containers": [{"name": "c", "image": "a"}], "activeDeadlineSeconds": 5},
    }
    relabelled = {
        "metadata": {"labels": {"x": "y"}},
        "spec": {**old["spec"], "activeDeadlineSeconds": 3, "tolerations": []},
    }
    assert not is_significant_pod_update(relabelled, old)
    new_image = {"metadata": {}, "spec": {"containers": [{"name": "c", "image": "b"}]}}
    assert is_significant_pod_update(new_image, old)
    with_debug = {"metadata": {}, "spec": {**old["spec"], "ephemeralContainers": [{"name": "d", "image": "x"}]}}
    assert is_significant_pod_update(with_debug, old)


def test_warn_defaults_to_a_stricter_enforce_level_without_a_warn_label():
    policy, _ = policy_from_labels({label("enforce"): "restricted", label("enforce-version"): "v1.25"}, Policy())
    assert str(policy.warn) == "restricted:v1.25"
    policy, _ = policy_from_labels(
        {label("enforce"): "baseline", label("warn-version"): "v1.20", label("enforce-version"): "v1.25"}, Policy()
    )
    assert str(policy.warn) == "baseline:v1.20"
    policy, _ = policy_from_labels({label("enforce"): "restricted", label("warn"): "privileged"}, Policy())
    assert str(policy.warn) == "privileged:latest"
    policy, _ = policy_from_labels({label("enforce"): "bogus"}, Policy())
    assert str(policy.warn) == "privileged:latest"  # a bad enforce label sets no warn default
