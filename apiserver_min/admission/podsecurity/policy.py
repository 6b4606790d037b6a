"""Pod Security policies: levels and versions, a namespace's labels read as a policy,
and the plugin's configuration (``PodSecurityConfiguration``)."""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Mapping

from ...api import names
from ...api.validation import FieldError, is_dns1123_label, is_dns1123_subdomain
from .checks import Version

PRIVILEGED, BASELINE, RESTRICTED = "privileged", "baseline", "restricted"
LEVELS = (PRIVILEGED, BASELINE, RESTRICTED)
LATEST = "latest"

MODES = ("enforce", "audit", "warn")
LABEL_PREFIX = names.POD_SECURITY_PREFIX
LEVEL_LABELS = {m: LABEL_PREFIX + m for m in MODES}
VERSION_LABELS = {m: LABEL_PREFIX + m + "-version" for m in MODES}
ALL_LABELS = frozenset(LEVEL_LABELS.values()) | frozenset(VERSION_LABELS.values())

_VERSION_RE = re.compile(r"^v1\.(0|[1-9][0-9]*)$")
LEVEL_ERROR = f"must be one of {', '.join(LEVELS)}"
VERSION_ERROR = 'must be "latest" or "v1.x"'

CONFIG_KIND = "PodSecurityConfiguration"
CONFIG_API_VERSIONS = tuple(f"{names.POD_SECURITY_CONFIG_GROUP}/{v}" for v in ("v1", "v1beta1", "v1alpha1"))


def parse_level(value: str) -> str | None:
    return value if value in LEVELS else None


def parse_version(value: str) -> tuple[bool, Version | None]:
    """(valid, version); version None means latest."""
    if value == LATEST:
        return True, None
    m = _VERSION_RE.match(value)
    if m is None:
        return False, None
    return True, (1, int(m.group(1)))


def compare_levels(a: str, b: str) -> int:
    return (LEVELS.index(a) > LEVELS.index(b)) - (LEVELS.index(a) < LEVELS.index(b))


@dataclasses.dataclass(frozen=True)
class LevelVersion:
    level: str = PRIVILEGED
    version: Version | None = None  # None: latest

    def __str__(self) -> str:
        v = LATEST if self.version is None else f"v{self.version[0]}.{self.version[1]}"
        return f"{self.level}:{v}"

    def equivalent(self, other: "LevelVersion") -> bool:
        return self.level == other.level and (self.level == PRIVILEGED or self.version == other.version)


@dataclasses.dataclass(frozen=True)
class Policy:
    enforce: LevelVersion = LevelVersion()
    audit: LevelVersion = LevelVersion()
    warn: LevelVersion = LevelVersion()

    def fully_privileged(self) -> bool:
        return self.enforce.level == self.audit.level == self.warn.level == PRIVILEGED

    def equivalent(self, other: "Policy") -> bool:
        return (
            self.enforce.equivalent(other.enforce)
            and self.audit.equivalent(other.audit)
            and self.warn.equivalent(other.warn)
        )


def policy_from_labels(labels: Mapping[str, Any] | None, defaults: Policy) -> tuple[Policy, list[FieldError]]:
    """A namespace's policy: its labels over DEFAULTS, with an error per bad label
    value. A bad enforce level counts as restricted (fail closed), a bad audit or
    warn level as privileged (fail open), a bad version as latest, as upstream."""
    if not labels:
        return defaults, []
    errs: list[FieldError] = []
    modes = {"enforce": defaults.enforce, "audit": defaults.audit, "warn": defaults.warn}
    for mode in MODES:
        lv = modes[mode]
        level_label, version_label = LEVEL_LABELS[mode], VERSION_LABELS[mode]
        if level_label in labels:
            raw = str(labels[level_label])
            level = parse_level(raw)
            if level is None:
                errs.append(FieldError.invalid(f"metadata.labels[{level_label}]", raw, LEVEL_ERROR))
                level = RESTRICTED if mode == "enforce" else PRIVILEGED
            lv = dataclasses.replace(lv, level=level)
        if version_label in labels:
            raw = str(labels[version_label])
            ok, version = parse_version(raw)
            if not ok:
                errs.append(FieldError.invalid(f"metadata.labels[{version_label}]", raw, VERSION_ERROR))
            lv = dataclasses.replace(lv, version=version)
        modes[mode] = lv
    # Since 1.26: an enforce level set (validly) and stricter than the warn level, with no
    # warn label, warns at the enforce level (and version, unless warn-version is set), so
    # pod controllers' templates that enforcement would refuse get a warning.
    enforce, warn = modes["enforce"], modes["warn"]
    enforce_set = LEVEL_LABELS["enforce"] in labels and parse_level(str(labels[LEVEL_LABELS["enforce"]])) is not None
    if enforce_set and LEVEL_LABELS["warn"] not in labels and compare_levels(enforce.level, warn.level) > 0:
        version = warn.version if VERSION_LABELS["warn"] in labels else enforce.version
        modes["warn"] = LevelVersion(enforce.level, version)
    return Policy(modes["enforce"], modes["audit"], modes["warn"]), errs


@dataclasses.dataclass(frozen=True)
class Configuration:
    defaults: Policy = Policy()
    exempt_usernames: frozenset[str] = frozenset()
    exempt_namespaces: frozenset[str] = frozenset()
    exempt_runtime_classes: frozenset[str] = frozenset()


def _strings(value: Any, path: str, errs: list[FieldError]) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        errs.append(FieldError.type_invalid(path, value, "must be a list of strings"))
        return []
    return value


def parse_configuration(doc: dict | None) -> Configuration:
    """The plugin's configuration from its part of the admission configuration file
    (None: the defaults, privileged:latest for every mode and no exemptions).
    ValueError listing every problem, with upstream's field paths."""
    if doc is None:
        return Configuration()
    if doc.get("kind") != CONFIG_KIND or doc.get("apiVersion") not in CONFIG_API_VERSIONS:
        raise ValueError(
            f"expected kind {CONFIG_KIND} with apiVersion one of {', '.join(CONFIG_API_VERSIONS)}, "
            f"got kind {doc.get('kind')!r}, apiVersion {doc.get('apiVersion')!r}"
        )
    unknown = sorted(set(doc) - {"apiVersion", "kind", "defaults", "exemptions"})
    errs: list[FieldError] = []
    defaults = doc.get("defaults") or {}
    exemptions = doc.get("exemptions") or {}
    if not isinstance(defaults, dict):
        errs.append(FieldError.type_invalid("defaults", defaults, "must be an object"))
        defaults = {}
    if not isinstance(exemptions, dict):
        errs.append(FieldError.type_invalid("exemptions", exemptions, "must be an object"))
        exemptions = {}
    unknown += [f"defaults.{f}" for f in sorted(set(defaults) - set(MODES) - {m + "-version" for m in MODES})]
    unknown += [f"exemptions.{f}" for f in sorted(set(exemptions) - {"usernames", "namespaces", "runtimeClasses"})]
    modes = {}
    for mode in MODES:
        level = str(defaults.get(mode, PRIVILEGED))
        if parse_level(level) is None:
            errs.append(FieldError.invalid(f"defaults.{mode}", level, LEVEL_ERROR))
        raw_version = str(defaults.get(mode + "-version", LATEST))
        ok, version = parse_version(raw_version)
        if not ok:
            errs.append(FieldError.invalid(f"defaults.{mode}-version", raw_version, VERSION_ERROR))
        modes[mode] = LevelVersion(level, version)
    namespaces = _exemptions(exemptions, "namespaces", errs, is_dns1123_label)
    classes = _exemptions(exemptions, "runtimeClasses", errs, is_dns1123_subdomain)
    usernames = _exemptions(exemptions, "usernames", errs, None)
    problems = [f"{f}: unknown field" for f in unknown] + [e.message() for e in errs]
    if problems:
        text = ", ".join(problems)
        raise ValueError(f"[{text}]" if len(problems) > 1 else text)
    return Configuration(Policy(modes["enforce"], modes["audit"], modes["warn"]), usernames, namespaces, classes)


def _exemptions(exemptions: dict, key: str, errs: list[FieldError], check: Any) -> frozenset[str]:
    seen: set[str] = set()
    for i, value in enumerate(_strings(exemptions.get(key), f"exemptions.{key}", errs)):
        path = f"exemptions.{key}[{i}]"
        if check is None:
            if value == "":
                errs.append(FieldError.required(path))
                continue
        else:
            problems = check(value)
            if problems:
                errs.append(FieldError.invalid(path, value, ", ".join(problems)))
                continue
        if value in seen:
            errs.append(FieldError.duplicate(path, value))
            continue
        seen.add(value)
    return frozenset(seen)
