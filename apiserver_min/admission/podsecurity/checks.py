"""The Pod Security Standards as checks, by level and policy version (upstream 1.27's set).

Each check looks at a pod's metadata and spec (plain API dicts) and answers None
(allowed) or a ``Violation``: a short reason and a detail naming what is wrong,
worded as upstream words it, since users grep for these texts. A check may have
several revisions, each from a minimum policy version on; ``checks_for(level,
version)`` gives the list a level and version evaluate, in upstream's order:
baseline checks by ID, then restricted checks by ID, where a restricted check may
replace baseline checks it supersedes (restricted volumes replace hostPath
volumes, restricted capabilities and seccomp replace their baseline forms).
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Iterator

from ...api import names

Version = tuple[int, int]  # (1, minor)
LATEST_CHECKED: Version = (1, 27)  # the newest minimum version of any check: "latest" and newer evaluate it


@dataclasses.dataclass(frozen=True)
class Violation:
    reason: str
    detail: str = ""


CheckFn = Callable[[dict, dict], "Violation | None"]


@dataclasses.dataclass(frozen=True)
class Revision:
    minimum: Version
    fn: CheckFn
    overrides: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Check:
    id: str
    level: str  # "baseline" | "restricted"
    revisions: tuple[Revision, ...]

    def at(self, version: Version) -> Revision | None:
        chosen = None
        for r in self.revisions:
            if r.minimum <= version:
                chosen = r
        return chosen


# --- helpers -------------------------------------------------------------------------


def join_quote(items: list[str]) -> str:
    return '"' + '", "'.join(items) + '"' if items else ""


def plural(singular: str, many: str, n: int) -> str:
    return singular if n == 1 else many


def containers(spec: dict) -> Iterator[dict]:
    """Init containers, containers, then ephemeral containers, as upstream visits them."""
    for key in ("initContainers", "containers", "ephemeralContainers"):
        items = spec.get(key)
        if isinstance(items, list):
            for c in items:
                if isinstance(c, dict):
                    yield c


def _sc(obj: dict) -> dict:
    sc = obj.get("securityContext")
    return sc if isinstance(sc, dict) else {}


def _has(obj: dict, key: str) -> bool:
    return isinstance(obj.get(key), dict)


def _name(c: dict) -> str:
    return str(c.get("name", ""))


def _windows(spec: dict) -> bool:
    os_ = spec.get("os")
    return isinstance(os_, dict) and os_.get("name") == "windows"


def _containers_phrase(bad: list[str]) -> str:
    return f"{plural('container', 'containers', len(bad))} {join_quote(bad)}"


# --- baseline ------------------------------------------------------------------------


def app_armor_profile(meta: dict, spec: dict) -> Violation | None:
    bad = []
    for k, v in (meta.get("annotations") or {}).items():
        if not k.startswith(names.ANNOTATION_APPARMOR_CONTAINER_PREFIX):
            continue
        v = str(v)
        if v and v != "runtime/default" and not v.startswith("localhost/"):
            bad.append(f'{k}="{v}"')
    if bad:
        bad.sort()
        return Violation(plural("forbidden AppArmor profile", "forbidden AppArmor profiles", len(bad)), ", ".join(bad))
    return None


BASELINE_CAPABILITIES = frozenset(
    {
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    }
)


def capabilities_baseline(meta: dict, spec: dict) -> Violation | None:
    bad, caps = [], set()
    for c in containers(spec):
        add = (_sc(c).get("capabilities") or {}).get("add") or []
        extra = [str(x) for x in add if str(x) not in BASELINE_CAPABILITIES]
        if extra:
            bad.append(_name(c))
            caps.update(extra)
    if bad:
        return Violation(
            "non-default capabilities",
            f"{_containers_phrase(bad)} must not include {join_quote(sorted(caps))} in securityContext.capabilities.add",
        )
    return None


def host_namespaces(meta: dict, spec: dict) -> Violation | None:
    used = [f"{f}=true" for f in ("hostNetwork", "hostPID", "hostIPC") if spec.get(f) is True]
    return Violation("host namespaces", ", ".join(used)) if used else None


def host_path_volumes(meta: dict, spec: dict) -> Violation | None:
    bad = [str(v.get("name", "")) for v in spec.get("volumes") or [] if isinstance(v, dict) and _has(v, "hostPath")]
    if bad:
        return Violation("hostPath volumes", f"{plural('volume', 'volumes', len(bad))} {join_quote(bad)}")
    return None


def host_ports(meta: dict, spec: dict) -> Violation | None:
    bad: list[str] = []
    ports: set[str] = set()
    for c in containers(spec):
        used = [p.get("hostPort") for p in c.get("ports") or [] if isinstance(p, dict) and p.get("hostPort")]
        if used:
            bad.append(_name(c))
            ports.update(str(p) for p in used)
    if bad:
        listed = sorted(ports)  # upstream sorts them as strings
        return Violation(
            "hostPort",
            f"{_containers_phrase(bad)} {plural('uses', 'use', len(bad))} "
            f"{plural('hostPort', 'hostPorts', len(listed))} {', '.join(listed)}",
        )
    return None


def privileged(meta: dict, spec: dict) -> Violation | None:
    bad = [_name(c) for c in containers(spec) if _sc(c).get("privileged") is True]
    if bad:
        return Violation("privileged", f"{_containers_phrase(bad)} must not set securityContext.privileged=true")
    return None


def proc_mount(meta: dict, spec: dict) -> Violation | None:
    bad, kinds = [], set()
    for c in containers(spec):
        pm = _sc(c).get("procMount")
        if pm is not None and pm != "Default":
            bad.append(_name(c))
            kinds.add(str(pm))
    if bad:
        return Violation(
            "procMount",
            f"{_containers_phrase(bad)} must not set securityContext.procMount to {join_quote(sorted(kinds))}",
        )
    return None


SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t"})


def se_linux_options(meta: dict, spec: dict) -> Violation | None:
    types: set[str] = set()
    flags = {"user": False, "role": False}

    def valid(opts: dict) -> bool:
        ok = True
        t = str(opts.get("type") or "")
        if t not in SELINUX_TYPES:
            types.add(t)
            ok = False
        for f in ("user", "role"):
            if opts.get(f):
                flags[f] = True
                ok = False
        return ok

    setters = []
    pod_opts = _sc(spec).get("seLinuxOptions")
    if isinstance(pod_opts, dict) and not valid(pod_opts):
        setters.append("pod")
    bad = []
    for c in containers(spec):
        opts = _sc(c).get("seLinuxOptions")
        if isinstance(opts, dict) and not valid(opts):
            bad.append(_name(c))
    if bad:
        setters.append(_containers_phrase(bad))
    if not setters:
        return None
    data = []
    if types:
        data.append(f"{plural('type', 'types', len(types))} {join_quote(sorted(types))}")
    if flags["user"]:
        data.append("user may not be set")
    if flags["role"]:
        data.append("role may not be set")
    return Violation(
        "seLinuxOptions", f"{' and '.join(setters)} set forbidden securityContext.seLinuxOptions: {'; '.join(data)}"
    )


SECCOMP_VALID = frozenset({"RuntimeDefault", "Localhost"})


def _seccomp_annotation_ok(v: str) -> bool:
    return v in ("runtime/default", "docker/default") or v.startswith("localhost/")


def seccomp_profile_baseline_1_0(meta: dict, spec: dict) -> Violation | None:
    """Before 1.19 seccomp was set by alpha annotations."""
    annotations = meta.get("annotations") or {}
    bad = set()
    v = annotations.get(names.ANNOTATION_SECCOMP_POD)
    if v is not None and not _seccomp_annotation_ok(str(v)):
        bad.add(f'{names.ANNOTATION_SECCOMP_POD}="{v}"')
    for c in containers(spec):
        key = names.ANNOTATION_SECCOMP_CONTAINER_PREFIX + _name(c)
        v = annotations.get(key)
        if v is not None and not _seccomp_annotation_ok(str(v)):
            bad.add(f'{key}="{v}"')
    if bad:
        return Violation(
            "seccompProfile", f"forbidden {plural('annotation', 'annotations', len(bad))} {', '.join(sorted(bad))}"
        )
    return None


def _explicit_bad_seccomp(spec: dict) -> tuple[list[str], set[str], bool, list[str]]:
    """(bad setters, bad values, pod sets a valid profile, containers without a profile)."""
    setters: list[str] = []
    values: set[str] = set()
    pod_ok = False
    profile = _sc(spec).get("seccompProfile")
    if isinstance(profile, dict):
        t = str(profile.get("type", ""))
        if t in SECCOMP_VALID:
            pod_ok = True
        else:
            setters.append("pod")
            values.add(t)
    bad, unset = [], []
    for c in containers(spec):
        p = _sc(c).get("seccompProfile")
        if isinstance(p, dict):
            t = str(p.get("type", ""))
            if t not in SECCOMP_VALID:
                bad.append(_name(c))
                values.add(t)
        else:
            unset.append(_name(c))
    if bad:
        setters.append(_containers_phrase(bad))
    return setters, values, pod_ok, unset


def seccomp_profile_baseline_1_19(meta: dict, spec: dict) -> Violation | None:
    setters, values, _, _ = _explicit_bad_seccomp(spec)
    if setters:
        return Violation(
            "seccompProfile",
            f"{' and '.join(setters)} must not set securityContext.seccompProfile.type to {join_quote(sorted(values))}",
        )
    return None


SYSCTLS_1_0 = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_unprivileged_port_start",
    }
)
SYSCTLS_1_27 = SYSCTLS_1_0 | {"net.ipv4.ip_local_reserved_ports"}


def _sysctls(allowed: frozenset[str]) -> CheckFn:
    def check(meta: dict, spec: dict) -> Violation | None:
        bad = [
            str(s.get("name", ""))
            for s in _sc(spec).get("sysctls") or []
            if isinstance(s, dict) and s.get("name") not in allowed
        ]
        return Violation("forbidden sysctls", ", ".join(bad)) if bad else None

    return check


def windows_host_process(meta: dict, spec: dict) -> Violation | None:
    def on(obj: dict) -> bool:
        wo = _sc(obj).get("windowsOptions")
        return isinstance(wo, dict) and wo.get("hostProcess") is True

    setters = ["pod"] if on(spec) else []
    bad = [_name(c) for c in containers(spec) if on(c)]
    if bad:
        setters.append(_containers_phrase(bad))
    if setters:
        return Violation(
            "hostProcess", f"{' and '.join(setters)} must not set securityContext.windowsOptions.hostProcess=true"
        )
    return None


# --- restricted ----------------------------------------------------------------------


def _linux_only(fn: CheckFn) -> CheckFn:
    """From 1.25 on, a check that applies to Linux only passes pods of ``spec.os.name: windows``."""

    def check(meta: dict, spec: dict) -> Violation | None:
        return None if _windows(spec) else fn(meta, spec)

    return check


def allow_privilege_escalation(meta: dict, spec: dict) -> Violation | None:
    bad = [_name(c) for c in containers(spec) if _sc(c).get("allowPrivilegeEscalation") is not False]
    if bad:
        return Violation(
            "allowPrivilegeEscalation != false",
            f"{_containers_phrase(bad)} must set securityContext.allowPrivilegeEscalation=false",
        )
    return None


def capabilities_restricted(meta: dict, spec: dict) -> Violation | None:
    missing_drop, adding, caps = [], [], set()
    for c in containers(spec):
        capabilities = _sc(c).get("capabilities")
        if not isinstance(capabilities, dict):
            missing_drop.append(_name(c))
            continue
        if "ALL" not in [str(x) for x in capabilities.get("drop") or []]:
            missing_drop.append(_name(c))
        extra = [str(x) for x in capabilities.get("add") or [] if str(x) != "NET_BIND_SERVICE"]
        if extra:
            adding.append(_name(c))
            caps.update(extra)
    details = []
    if missing_drop:
        details.append(f'{_containers_phrase(missing_drop)} must set securityContext.capabilities.drop=["ALL"]')
    if adding:
        details.append(
            f"{_containers_phrase(adding)} must not include {join_quote(sorted(caps))} "
            "in securityContext.capabilities.add"
        )
    return Violation("unrestricted capabilities", "; ".join(details)) if details else None


ALLOWED_VOLUME_SOURCES = (
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
)
# The restricted volume types upstream names, in the order it tests them.
RESTRICTED_VOLUME_SOURCES = (
    "hostPath",
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "gitRepo",
    "nfs",
    "iscsi",
    "glusterfs",
    "rbd",
    "flexVolume",
    "cinder",
    "cephfs",
    "flocker",
    "fc",
    "azureFile",
    "vsphereVolume",
    "quobyte",
    "azureDisk",
    "photonPersistentDisk",
    "portworxVolume",
    "scaleIO",
    "storageos",
)


def restricted_volumes(meta: dict, spec: dict) -> Violation | None:
    bad, kinds = [], set()
    for v in spec.get("volumes") or []:
        if not isinstance(v, dict) or any(v.get(s) is not None for s in ALLOWED_VOLUME_SOURCES):
            continue
        bad.append(str(v.get("name", "")))
        kinds.add(next((s for s in RESTRICTED_VOLUME_SOURCES if v.get(s) is not None), "unknown"))
    if bad:
        return Violation(
            "restricted volume types",
            f"{plural('volume', 'volumes', len(bad))} {join_quote(bad)} {plural('uses', 'use', len(bad))} "
            f"{plural('restricted volume type', 'restricted volume types', len(kinds))} {join_quote(sorted(kinds))}",
        )
    return None


def run_as_non_root(meta: dict, spec: dict) -> Violation | None:
    setters = []
    pod_value = _sc(spec).get("runAsNonRoot")
    pod_ok = pod_value is True
    if pod_value is False:
        setters.append("pod")
    explicit, implicit = [], []
    for c in containers(spec):
        v = _sc(c).get("runAsNonRoot")
        if v is False:
            explicit.append(_name(c))
        elif v is None and not pod_ok:
            implicit.append(_name(c))
    if explicit:
        setters.append(_containers_phrase(explicit))
    if setters:
        return Violation(
            "runAsNonRoot != true", f"{' and '.join(setters)} must not set securityContext.runAsNonRoot=false"
        )
    if implicit:
        return Violation(
            "runAsNonRoot != true", f"pod or {_containers_phrase(implicit)} must set securityContext.runAsNonRoot=true"
        )
    return None


def run_as_user(meta: dict, spec: dict) -> Violation | None:
    setters = ["pod"] if _sc(spec).get("runAsUser") == 0 else []
    bad = [_name(c) for c in containers(spec) if _sc(c).get("runAsUser") == 0]
    if bad:
        setters.append(_containers_phrase(bad))
    if setters:
        return Violation("runAsUser=0", f"{' and '.join(setters)} must not set runAsUser=0")
    return None


def seccomp_profile_restricted(meta: dict, spec: dict) -> Violation | None:
    setters, values, pod_ok, unset = _explicit_bad_seccomp(spec)
    if setters:
        return Violation(
            "seccompProfile",
            f"{' and '.join(setters)} must not set securityContext.seccompProfile.type to {join_quote(sorted(values))}",
        )
    if unset and not pod_ok:
        return Violation(
            "seccompProfile",
            f"pod or {_containers_phrase(unset)} must set securityContext.seccompProfile.type to "
            '"RuntimeDefault" or "Localhost"',
        )
    return None


# --- the registry --------------------------------------------------------------------

BASELINE, RESTRICTED = "baseline", "restricted"

CHECKS: tuple[Check, ...] = (
    Check("appArmorProfile", BASELINE, (Revision((1, 0), app_armor_profile),)),
    Check("capabilities_baseline", BASELINE, (Revision((1, 0), capabilities_baseline),)),
    Check("hostNamespaces", BASELINE, (Revision((1, 0), host_namespaces),)),
    Check("hostPathVolumes", BASELINE, (Revision((1, 0), host_path_volumes),)),
    Check("hostPorts", BASELINE, (Revision((1, 0), host_ports),)),
    Check("privileged", BASELINE, (Revision((1, 0), privileged),)),
    Check("procMount", BASELINE, (Revision((1, 0), proc_mount),)),
    Check("seLinuxOptions", BASELINE, (Revision((1, 0), se_linux_options),)),
    Check(
        "seccompProfile_baseline",
        BASELINE,
        (Revision((1, 0), seccomp_profile_baseline_1_0), Revision((1, 19), seccomp_profile_baseline_1_19)),
    ),
    Check("sysctls", BASELINE, (Revision((1, 0), _sysctls(SYSCTLS_1_0)), Revision((1, 27), _sysctls(SYSCTLS_1_27)))),
    Check("windowsHostProcess", BASELINE, (Revision((1, 0), windows_host_process),)),
    Check(
        "allowPrivilegeEscalation",
        RESTRICTED,
        (Revision((1, 8), allow_privilege_escalation), Revision((1, 25), _linux_only(allow_privilege_escalation))),
    ),
    Check(
        "capabilities_restricted",
        RESTRICTED,
        (
            Revision((1, 22), capabilities_restricted, ("capabilities_baseline",)),
            Revision((1, 25), _linux_only(capabilities_restricted), ("capabilities_baseline",)),
        ),
    ),
    Check("restrictedVolumes", RESTRICTED, (Revision((1, 0), restricted_volumes, ("hostPathVolumes",)),)),
    Check("runAsNonRoot", RESTRICTED, (Revision((1, 0), run_as_non_root),)),
    Check("runAsUser", RESTRICTED, (Revision((1, 23), run_as_user),)),
    Check(
        "seccompProfile_restricted",
        RESTRICTED,
        (
            Revision((1, 19), seccomp_profile_restricted, ("seccompProfile_baseline",)),
            Revision((1, 25), _linux_only(seccomp_profile_restricted), ("seccompProfile_baseline",)),
        ),
    ),
)

_PLANS: dict[tuple[str, Version], tuple[CheckFn, ...]] = {}


def checks_for(level: str, version: Version | None) -> tuple[CheckFn, ...]:
    """The check functions LEVEL evaluates at policy VERSION (None: latest), in order."""
    if level not in (BASELINE, RESTRICTED):
        return ()
    v = LATEST_CHECKED if version is None or version > LATEST_CHECKED else version
    plan = _PLANS.get((level, v))
    if plan is None:
        chosen: dict[str, Revision] = {}
        for check in CHECKS:
            if check.level == BASELINE or level == RESTRICTED:
                r = check.at(v)
                if r is not None:
                    chosen[check.id] = r
        overridden = {o for r in chosen.values() for o in r.overrides}
        baseline = sorted(c.id for c in CHECKS if c.level == BASELINE and c.id in chosen and c.id not in overridden)
        restricted = sorted(c.id for c in CHECKS if c.level == RESTRICTED and c.id in chosen)
        plan = _PLANS[(level, v)] = tuple(chosen[i].fn for i in baseline + restricted)
    return plan


def evaluate(level: str, version: Version | None, meta: dict, spec: dict) -> list[Violation]:
    """Every violation of LEVEL at VERSION by a pod's METADATA and SPEC (privileged: none)."""
    out = []
    for fn in checks_for(level, version):
        v = fn(meta, spec)
        if v is not None:
            out.append(v)
    return out


def forbidden_detail(violations: list[Violation]) -> str:
    """``reason (detail), reason, ...``: upstream's one-line summary of the violations."""
    return ", ".join(f"{v.reason} ({v.detail})" if v.detail else v.reason for v in violations)


def forbidden_reasons(violations: list[Violation]) -> str:
    return ", ".join(v.reason for v in violations)
