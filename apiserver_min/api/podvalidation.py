"""Pod validation, worded as upstream's ValidatePodCreate / ValidatePodUpdate (v1.27).

Shared contract code: the API server validates pods on create and update, and
the node agent validates static pods read from manifest files, so both reject
the same pods with the same field paths, reasons and messages a user of the
upstream tools already knows (``spec.containers[0].image: Required value``).

Defaulted fields. Upstream validates *after* defaulting, so a field that
defaulting fills (restartPolicy, dnsPolicy, imagePullPolicy,
terminationMessagePolicy, port protocol, probe thresholds, httpGet path and
scheme, fieldRef apiVersion, hostPort under hostNetwork) is never empty by the
time it is checked. Here an absent or empty defaultable field is accepted as
"the default applies": on defaulted input the result is identical to upstream,
and a caller that validates before defaulting is not told to set a field that
defaulting would have set for it. Explicit bad values are always reported.

Upstream quirks that users see in messages are kept on purpose, e.g. a
volumeMount's bad subPath is reported at ``...volumeMounts.subPath`` (no index)
and downwardAPI volume items at ``...downwardAPI.path``.
"""

from __future__ import annotations

import copy
import ipaddress
import json
import posixpath
import re
from typing import Any, Iterable, TypeGuard

from apiserver_min.api import names
from apiserver_min.api.helpers import dict_at
from apiserver_min.api.quantity import Quantity, QuantityError, parse_quantity
from apiserver_min.api.validation import (
    FIELD_VALUE_NOT_FOUND,
    FieldError,
    is_dns1123_label,
    is_dns1123_subdomain,
    is_qualified_name,
    is_valid_label_value,
    name_rule,
    regex_error,
    validate_annotations,
    validate_generate_name,
    validate_label_key,
    validate_labels,
    validate_object_name,
)

__all__ = [
    "validate_pod",
    "validate_pod_update",
    "validate_pod_ephemeral_containers_update",
    "validate_pod_spec",
    "validate_pod_metadata",
    "validate_tolerations",
    "is_valid_port_name",
    "is_env_var_name",
    "POD_UPDATE_FORBIDDEN_MESSAGE",
]

Errs = list[FieldError]

MAX_INT32 = 2**31 - 1
MAX_DNS_NAMESERVERS = 3
MAX_DNS_SEARCH_PATHS = 32
MAX_DNS_SEARCH_LIST_CHARS = 2048

# The text upstream puts in front of the spec diff when an update touches a
# field that may not change (feature gate InPlacePodVerticalScaling off).
POD_UPDATE_FORBIDDEN_MESSAGE = (
    "pod updates may not change fields other than "
    "`spec.containers[*].image`,"
    "`spec.initContainers[*].image`,"
    "`spec.activeDeadlineSeconds`,"
    "`spec.tolerations` (only additions to existing tolerations),"
    "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)"
)

# Upstream's answers for writes through pods/ephemeralcontainers.
EPHEMERAL_STATIC_POD_MESSAGE = "static pods do not support ephemeral containers"
EPHEMERAL_REMOVED_MESSAGE = 'existing ephemeral containers "{name}" may not be removed\n'
EPHEMERAL_CHANGED_MESSAGE = 'existing ephemeral containers "{name}" may not be changed\n'

_NEGATIVE_MSG = "must be greater than or equal to 0"
_FILE_MODE_MSG = "must be a number between 0 and 0777 (octal), both inclusive"
_INIT_FORBIDDEN_MSG = "may not be set for init containers"
_EPHEMERAL_FORBIDDEN_MSG = "cannot be set for an Ephemeral Container"


def _range_error(lo: int, hi: int) -> str:
    return f"must be between {lo} and {hi}, inclusive"


# --- small type helpers ---------------------------------------------------------------
# Bodies are decoded JSON/YAML, so every value may have the wrong type; those
# become TypeInvalid errors at the field instead of exceptions.


def _is_int(v: Any) -> TypeGuard[int]:
    return isinstance(v, int) and not isinstance(v, bool)


def _str(obj: dict, key: str, path: str, errs: Errs) -> str:
    v = obj.get(key)
    if v is None:
        return ""
    if not isinstance(v, str):
        errs.append(FieldError.type_invalid(f"{path}.{key}", v, "must be a string"))
        return ""
    return v


def _int(obj: dict, key: str, path: str, errs: Errs) -> int | None:
    v = obj.get(key)
    if v is None:
        return None
    if not _is_int(v):
        errs.append(FieldError.type_invalid(f"{path}.{key}", v, "must be an integer"))
        return None
    return v


def _dict(obj: dict, key: str, path: str, errs: Errs) -> dict | None:
    v = obj.get(key)
    if v is None:
        return None
    if not isinstance(v, dict):
        errs.append(FieldError.type_invalid(f"{path}.{key}", v, "must be an object"))
        return None
    return v


def _list(obj: dict, key: str, path: str, errs: Errs) -> list:
    v = obj.get(key)
    if v is None:
        return []
    if not isinstance(v, list):
        errs.append(FieldError.type_invalid(f"{path}.{key}", v, "must be a list"))
        return []
    return v


def _items(obj: dict, key: str, path: str, errs: Errs) -> list[tuple[str, dict]]:
    """(path, element) for the object elements of a list field."""
    v = obj.get(key)
    if v is None or (type(v) is list and not v):
        return []  # the common absent or empty list: no path to build
    out = []
    for i, item in enumerate(_list(obj, key, path, errs)):
        p = f"{path}.{key}[{i}]"
        if not isinstance(item, dict):
            errs.append(FieldError.type_invalid(p, item, "must be an object"))
            continue
        out.append((p, item))
    return out


def _str_map(obj: dict, key: str, path: str, errs: Errs) -> dict[str, str] | None:
    v = obj.get(key)
    if v is None:
        return None
    if not isinstance(v, dict) or not all(isinstance(k, str) and isinstance(x, str) for k, x in v.items()):
        errs.append(FieldError.type_invalid(f"{path}.{key}", v, "must be a map of strings"))
        return None
    return v


def _invalid_all(path: str, value: Any, msgs: Iterable[str]) -> Errs:
    return [FieldError.invalid(path, value, m) for m in msgs]


def _not_found(path: str, value: Any) -> FieldError:
    return FieldError(FIELD_VALUE_NOT_FOUND, path, value, "")


# --- string rules ---------------------------------------------------------------------

_PORT_NAME_CHARSET = re.compile(r"[-a-z0-9]+")
_PORT_NAME_ONE_LETTER = re.compile(r"[a-z]")

_ENV_VAR_NAME_FMT = "[-._a-zA-Z][-._a-zA-Z0-9]*"
_ENV_VAR_NAME_RE = re.compile(_ENV_VAR_NAME_FMT)
_ENV_VAR_NAME_ERR = (
    "a valid environment variable name must consist of alphabetic characters, digits, "
    "'_', '-', or '.', and must not start with a digit"
)

_CONFIG_MAP_KEY_FMT = "[-._a-zA-Z0-9]+"
_CONFIG_MAP_KEY_RE = re.compile(_CONFIG_MAP_KEY_FMT)
_CONFIG_MAP_KEY_ERR = "a valid config key must consist of alphanumeric characters, '-', '_' or '.'"

_HTTP_HEADER_FMT = "[-A-Za-z0-9]+"
_HTTP_HEADER_RE = re.compile(_HTTP_HEADER_FMT)

_SYSCTL_SEGMENT_FMT = "[a-z0-9]([-_a-z0-9]*[a-z0-9])?"
_SYSCTL_FMT = "(" + _SYSCTL_SEGMENT_FMT + "[\\./])*" + _SYSCTL_SEGMENT_FMT
_SYSCTL_RE = re.compile("^" + _SYSCTL_FMT + "$")
SYSCTL_MAX_LENGTH = 253


def is_valid_port_name(port: str) -> list[str]:
    """An IANA service name (upstream IsValidPortName)."""
    errs: list[str] = []
    if len(port) > 15:
        errs.append("must be no more than 15 characters")
    if not _PORT_NAME_CHARSET.fullmatch(port):
        errs.append("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)")
    elif not _PORT_NAME_ONE_LETTER.search(port):
        errs.append("must contain at least one letter (a-z)")
    if "--" in port:
        errs.append("must not contain consecutive hyphens")
    if port and (port[0] == "-" or port[-1] == "-"):
        errs.append("must not begin or end with a hyphen")
    return errs


def _is_valid_port_num(port: int) -> list[str]:
    return [] if 1 <= port <= 65535 else [_range_error(1, 65535)]


def _has_chdir_prefix(value: str) -> list[str]:
    if value == ".":
        return ["must not be '.'"]
    if value == "..":
        return ["must not be '..'"]
    if value.startswith(".."):
        return ["must not start with '..'"]
    return []


_GOOD_ENV_VAR_NAMES: set[str] = set()


def is_env_var_name(value: str) -> list[str]:
    """Upstream IsEnvVarName (the relaxed C-identifier-like rule)."""
    if value in _GOOD_ENV_VAR_NAMES:
        return []
    errs = _env_var_name_problems(value)
    if not errs:
        _remember(_GOOD_ENV_VAR_NAMES, value)
    return errs


def _env_var_name_problems(value: str) -> list[str]:
    errs: list[str] = []
    if not _ENV_VAR_NAME_RE.fullmatch(value):
        errs.append(regex_error(_ENV_VAR_NAME_ERR, _ENV_VAR_NAME_FMT, "my.env-name", "MY_ENV.NAME", "MyEnvName1"))
    return errs + _has_chdir_prefix(value)


def is_config_map_key(value: str) -> list[str]:
    """A key of a ConfigMap's or Secret's data (upstream IsConfigMapKey)."""
    errs: list[str] = []
    if len(value) > 253:
        errs.append("must be no more than 253 characters")
    if not _CONFIG_MAP_KEY_RE.fullmatch(value):
        errs.append(regex_error(_CONFIG_MAP_KEY_ERR, _CONFIG_MAP_KEY_FMT, "key.name", "KEY_NAME", "key-name"))
    return errs + _has_chdir_prefix(value)


def _is_http_header_name(value: str) -> list[str]:
    if _HTTP_HEADER_RE.fullmatch(value):
        return []
    return [
        regex_error(
            "a valid HTTP header must consist of alphanumeric characters or '-'", _HTTP_HEADER_FMT, "X-Header-Name"
        )
    ]


def _is_valid_ip(value: str) -> bool:
    try:
        ipaddress.ip_address(value)
        return True
    except ValueError:
        # Upstream parses "sloppily": IPv4 octets with leading zeros are accepted.
        parts = value.split(".")
        if len(parts) == 4 and all(p.isdigit() and len(p) <= 3 and int(p) <= 255 for p in parts):
            return True
        return False


def _subdomain(value: str, path: str) -> Errs:
    return _invalid_all(path, value, is_dns1123_subdomain(value))


_GOOD_LABELS: set[str] = set()


def _label(value: str, path: str) -> Errs:
    if value in _GOOD_LABELS:
        return []
    errs = _invalid_all(path, value, is_dns1123_label(value))
    if not errs:
        _remember(_GOOD_LABELS, value)
    return errs


def _validate_local_descending_path(target: str, path: str) -> Errs:
    errs: Errs = []
    if posixpath.isabs(target):
        errs.append(FieldError.invalid(path, target, "must be a relative path"))
    errs += _validate_path_no_backsteps(target, path)
    return errs


def _validate_path_no_backsteps(target: str, path: str) -> Errs:
    if ".." in target.split("/"):
        return [FieldError.invalid(path, target, "must not contain '..'")]
    return []


def _validate_local_non_reserved_path(target: str, path: str) -> Errs:
    errs = _validate_local_descending_path(target, path)
    if target.startswith("..") and not target.startswith("../"):
        errs.append(FieldError.invalid(path, target, "must not start with '..'"))
    return errs


def _port_num_or_name(port: Any, path: str) -> Errs:
    if _is_int(port):
        return _invalid_all(path, port, _is_valid_port_num(port))
    if isinstance(port, str):
        # An IntOrString holding digits is still a string to upstream's decoder
        # only when quoted; YAML/JSON "8080" stays a name and is invalid as one.
        return _invalid_all(path, port, is_valid_port_name(port))
    if port is None:
        return _invalid_all(path, 0, _is_valid_port_num(0))
    return [FieldError.type_invalid(path, port, "must be an integer or a string")]


# Parsed quantity strings: the same few ("100m", "64Mi") arrive in nearly every pod,
# and Quantity is immutable, so one parse serves them all.
_QUANTITY_CACHE: dict[str, Quantity] = {}
_CACHE_MAX = 4096


def _quantity(value: Any, path: str, errs: Errs) -> Quantity | None:
    if type(value) is str:
        q = _QUANTITY_CACHE.get(value)
        if q is not None:
            return q
    try:
        q = parse_quantity(value)
    except QuantityError as exc:
        errs.append(FieldError.invalid(path, value, str(exc)))
        return None
    if type(value) is str:
        if len(_QUANTITY_CACHE) >= _CACHE_MAX:
            _QUANTITY_CACHE.clear()
        _QUANTITY_CACHE[value] = q
    return q


def _remember(cache: set, value: str) -> None:
    """Add a string that passed a pure check to its bounded cache of good ones."""
    if len(cache) >= _CACHE_MAX:
        cache.clear()
    cache.add(value)


# --- metadata -------------------------------------------------------------------------


def validate_pod_metadata(meta: Any, path: str = "metadata") -> Errs:
    """ObjectMeta of a pod: name (DNS subdomain), namespace (DNS label), labels, annotations."""
    if not isinstance(meta, dict):
        return [FieldError.required(path)]
    errs: Errs = []
    name, gen = meta.get("name"), meta.get("generateName")
    if gen:
        errs += validate_generate_name(gen, f"{path}.generateName", "subdomain")
    if name or not gen:
        errs += validate_object_name(name, f"{path}.name", "subdomain")
    ns = meta.get("namespace")
    if not ns:
        errs.append(FieldError.required(f"{path}.namespace"))
    elif not isinstance(ns, str):
        errs.append(FieldError.type_invalid(f"{path}.namespace", ns, "must be a string"))
    else:
        errs += validate_object_name(ns, f"{path}.namespace", "label")
    errs += validate_labels(meta.get("labels"), f"{path}.labels")
    errs += validate_annotations(meta.get("annotations"), f"{path}.annotations")
    return errs


def _pod_specific_annotations(annotations: Any, spec: dict, path: str) -> Errs:
    if not isinstance(annotations, dict):
        return []
    errs: Errs = []
    key = names.ANNOTATION_CONFIG_MIRROR
    if key in annotations and not spec.get("nodeName"):
        errs.append(
            FieldError.invalid(
                f"{path}[{key}]", annotations[key], "must set spec.nodeName if mirror pod annotation is set"
            )
        )
    return errs


def _pod_specific_annotation_updates(new: Any, old: Any, path: str) -> Errs:
    new = new if isinstance(new, dict) else {}
    old = old if isinstance(old, dict) else {}
    key = names.ANNOTATION_CONFIG_MIRROR
    if key in old and new.get(key) != old[key]:
        return [FieldError.forbidden(f"{path}[{key}]", "may not remove or update mirror pod annotation")]
    if key in new and key not in old:
        return [FieldError.forbidden(f"{path}[{key}]", "may not add mirror pod annotation")]
    return []


# --- volumes --------------------------------------------------------------------------

# Upstream's order: when several sources are set, the later ones are reported.
_VOLUME_SOURCES = (
    "emptyDir",
    "hostPath",
    "gitRepo",
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "secret",
    "nfs",
    "iscsi",
    "glusterfs",
    "flocker",
    "persistentVolumeClaim",
    "rbd",
    "cinder",
    "cephfs",
    "quobyte",
    "downwardAPI",
    "fc",
    "azureFile",
    "vsphereVolume",
    "photonPersistentDisk",
    "portworxVolume",
    "azureDisk",
    "storageos",
    "projected",
    "scaleIO",
    "configMap",
    "csi",
    "ephemeral",
)

_HOST_PATH_TYPES = ("", "BlockDevice", "CharDevice", "Directory", "DirectoryOrCreate", "File", "FileOrCreate", "Socket")
_EMPTY_DIR_MEDIA = ("", "HugePages", "Memory")

_VOLUME_DOWNWARD_FIELDS = (
    "metadata.annotations",
    "metadata.labels",
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
)
_ENV_DOWNWARD_FIELDS = (
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
    "spec.nodeName",
    "spec.serviceAccountName",
    "status.hostIP",
    "status.podIP",
    "status.podIPs",
)
# Field labels the downward API converter knows at all (anything else: a conversion error).
_CONVERTIBLE_FIELDS = frozenset(
    {
        "metadata.annotations",
        "metadata.labels",
        "metadata.name",
        "metadata.namespace",
        "metadata.uid",
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.serviceAccountName",
        "spec.schedulerName",
        "status.phase",
        "status.hostIP",
        "status.podIP",
        "status.podIPs",
    }
)
_RESOURCE_FIELD_EXPRESSIONS = (
    "limits.cpu",
    "limits.ephemeral-storage",
    "limits.memory",
    "requests.cpu",
    "requests.ephemeral-storage",
    "requests.memory",
)
_RESOURCE_FIELD_PREFIXES = ("limits.hugepages-", "requests.hugepages-")
_CPU_DIVISORS = frozenset({"1m", "1"})
_BYTE_DIVISORS = frozenset({"1", "1k", "1M", "1G", "1T", "1P", "1E", "1Ki", "1Mi", "1Gi", "1Ti", "1Pi", "1Ei"})
_BYTE_DIVISOR_TEXT = "1, 1k, 1M, 1G, 1T, 1P, 1E, 1Ki, 1Mi, 1Gi, 1Ti, 1Pi, 1Ei"


def _file_mode(obj: dict, key: str, path: str, errs: Errs) -> None:
    mode = _int(obj, key, path, errs)
    if mode is not None and not 0 <= mode <= 0o777:
        errs.append(FieldError.invalid(f"{path}.{key}", mode, _FILE_MODE_MSG))


def _key_to_path(kp: dict, path: str) -> Errs:
    errs: Errs = []
    key = _str(kp, "key", path, errs)
    target = _str(kp, "path", path, errs)
    if not key:
        errs.append(FieldError.required(f"{path}.key"))
    if not target:
        errs.append(FieldError.required(f"{path}.path"))
    errs += _validate_local_non_reserved_path(target, f"{path}.path")
    _file_mode(kp, "mode", path, errs)
    return errs


def _split_subscripted(field_path: str) -> tuple[str, str, bool]:
    if not field_path.endswith("']"):
        return field_path, "", False
    parts = field_path[:-2].split("['", 1)
    if len(parts) < 2 or not parts[0]:
        return field_path, "", False
    return parts[0], parts[1], True


def _object_field_selector(fs: dict, expressions: tuple[str, ...], path: str) -> Errs:
    errs: Errs = []
    # An empty apiVersion is defaulted to "v1" (upstream: Required, but only ever seen defaulted).
    api_version = _str(fs, "apiVersion", path, errs) or "v1"
    field_path = _str(fs, "fieldPath", path, errs)
    if errs:
        return errs
    if not field_path:
        return [FieldError.required(f"{path}.fieldPath")]
    base, subscript, subscripted = _split_subscripted(field_path)
    if api_version != "v1":
        conv = f"unsupported pod version: {api_version}"
    elif subscripted and base not in ("metadata.annotations", "metadata.labels"):
        conv = f"field label does not support subscript: {field_path}"
    elif not subscripted and field_path not in _CONVERTIBLE_FIELDS and field_path != "spec.host":
        conv = f"field label not supported: {field_path}"
    else:
        conv = ""
    if conv:
        return [FieldError.invalid(f"{path}.fieldPath", field_path, f"error converting fieldPath: {conv}")]
    if field_path == "spec.host":  # old clients' spelling of spec.nodeName
        base = "spec.nodeName"
    if subscripted:
        key = subscript.lower() if base == "metadata.annotations" else subscript
        errs += _invalid_all(path, key, is_qualified_name(key))
    elif base not in expressions:
        errs.append(FieldError.not_supported(f"{path}.fieldPath", base, sorted(expressions)))
    return errs


def _resource_field_selector(fs: dict, path: str, volume: bool) -> Errs:
    errs: Errs = []
    container = _str(fs, "containerName", path, errs)
    resource = _str(fs, "resource", path, errs)
    if volume and not container:
        errs.append(FieldError.required(f"{path}.containerName"))
    elif not resource:
        errs.append(FieldError.required(f"{path}.resource"))
    elif resource not in _RESOURCE_FIELD_EXPRESSIONS and not resource.startswith(_RESOURCE_FIELD_PREFIXES):
        errs.append(FieldError.not_supported(f"{path}.resource", resource, _RESOURCE_FIELD_EXPRESSIONS))
    if fs.get("divisor") is not None:
        divisor = _quantity(fs["divisor"], f"{path}.divisor", errs)
        if divisor is not None and not divisor.is_zero():
            text = divisor.canonical()
            if resource in ("limits.cpu", "requests.cpu"):
                if text not in _CPU_DIVISORS:
                    errs.append(
                        FieldError.invalid(
                            f"{path}.divisor",
                            resource,
                            "only divisor's values 1m and 1 are supported with the cpu resource",
                        )
                    )
            elif resource in ("limits.memory", "requests.memory"):
                if text not in _BYTE_DIVISORS:
                    errs.append(
                        FieldError.invalid(
                            f"{path}.divisor",
                            resource,
                            f"only divisor's values {_BYTE_DIVISOR_TEXT} are supported with the memory resource",
                        )
                    )
            elif resource in ("limits.ephemeral-storage", "requests.ephemeral-storage"):
                if text not in _BYTE_DIVISORS:
                    errs.append(
                        FieldError.invalid(
                            f"{path}.divisor",
                            resource,
                            f"only divisor's values {_BYTE_DIVISOR_TEXT} are supported with the local ephemeral "
                            "storage resource",
                        )
                    )
            if resource.startswith(_RESOURCE_FIELD_PREFIXES) and text not in _BYTE_DIVISORS:
                errs.append(
                    FieldError.invalid(
                        f"{path}.divisor",
                        resource,
                        f"only divisor's values {_BYTE_DIVISOR_TEXT} are supported with the hugepages resource",
                    )
                )
    return errs


def _downward_api_file(f: dict, path: str) -> Errs:
    """One downwardAPI item; ``path`` is the volume source's path, as upstream reports it."""
    errs: Errs = []
    target = _str(f, "path", path, errs)
    if not target:
        errs.append(FieldError.required(f"{path}.path"))
    errs += _validate_local_non_reserved_path(target, f"{path}.path")
    field_ref = _dict(f, "fieldRef", path, errs)
    resource_ref = _dict(f, "resourceFieldRef", path, errs)
    if field_ref is not None:
        errs += _object_field_selector(field_ref, _VOLUME_DOWNWARD_FIELDS, f"{path}.fieldRef")
        if resource_ref is not None:
            errs.append(
                FieldError.invalid(
                    path, "resource", "fieldRef and resourceFieldRef can not be specified simultaneously"
                )
            )
    elif resource_ref is not None:
        errs += _resource_field_selector(resource_ref, f"{path}.resourceFieldRef", True)
    else:
        errs.append(FieldError.required(path, "one of fieldRef and resourceFieldRef is required"))
    _file_mode(f, "mode", path, errs)
    return errs


def _projected(src: dict, path: str) -> Errs:
    errs: Errs = []
    _file_mode(src, "defaultMode", path, errs)
    all_paths: set[str] = set()
    for spath, source in _items(src, "sources", path, errs):
        count = 0
        for kind, name_key in (("secret", "name"), ("configMap", "name")):
            part = _dict(source, kind, spath, errs)
            if part is None:
                continue
            count += 1
            ppath = f"{spath}.{kind}"
            if not _str(part, name_key, ppath, errs):
                errs.append(FieldError.required(f"{ppath}.{name_key}"))
            for ipath, kp in _items(part, "items", ppath, errs):
                errs += _key_to_path(kp, ipath)
                target = kp.get("path")
                if isinstance(target, str) and target:
                    if target in all_paths:
                        errs.append(FieldError.invalid(path, part.get(name_key, ""), "conflicting duplicate paths"))
                    all_paths.add(target)
        dapi = _dict(source, "downwardAPI", spath, errs)
        if dapi is not None:
            count += 1
            ppath = f"{spath}.downwardAPI"
            for _, f in _items(dapi, "items", ppath, errs):
                errs += _downward_api_file(f, ppath)
                target = f.get("path")
                if isinstance(target, str) and target:
                    if target in all_paths:
                        errs.append(FieldError.invalid(path, target, "conflicting duplicate paths"))
                    all_paths.add(target)
        token = _dict(source, "serviceAccountToken", spath, errs)
        if token is not None:
            count += 1
            ppath = f"{spath}.serviceAccountToken"
            exp = _int(token, "expirationSeconds", ppath, errs)
            exp = 3600 if token.get("expirationSeconds") is None else exp
            if exp is not None and exp < 600:
                errs.append(
                    FieldError.invalid(
                        f"{ppath}.expirationSeconds", exp, "may not specify a duration less than 10 minutes"
                    )
                )
            if exp is not None and exp > 1 << 32:
                errs.append(
                    FieldError.invalid(
                        f"{ppath}.expirationSeconds", exp, "may not specify a duration larger than 2^32 seconds"
                    )
                )
            if not _str(token, "path", ppath, errs):
                errs.append(FieldError.required(f"{path}.path"))
        if count > 1:
            errs.append(FieldError.forbidden(spath, "may not specify more than 1 volume type"))
    return errs


def _volume_source(vol: dict, path: str) -> Errs:
    errs: Errs = []
    count = 0
    for kind in _VOLUME_SOURCES:
        src = vol.get(kind)
        if src is None:
            continue
        spath = f"{path}.{kind}"
        if count > 0:
            errs.append(FieldError.forbidden(spath, "may not specify more than 1 volume type"))
            continue
        count += 1
        if not isinstance(src, dict):
            errs.append(FieldError.type_invalid(spath, src, "must be an object"))
            continue
        errs += _VOLUME_CHECKS.get(kind, _no_check)(src, spath)
    if count == 0:
        errs.append(FieldError.required(path, "must specify a volume type"))
    return errs


def _no_check(src: dict, path: str) -> Errs:
    return []


def _empty_dir(src: dict, path: str) -> Errs:
    errs: Errs = []
    medium = _str(src, "medium", path, errs)
    # Upstream leaves the medium to the node; rejecting an unknown one here
    # keeps a typo from surfacing only as a mount failure on the node.
    if medium not in _EMPTY_DIR_MEDIA and not medium.startswith("HugePages-"):
        errs.append(FieldError.not_supported(f"{path}.medium", medium, _EMPTY_DIR_MEDIA))
    if src.get("sizeLimit") is not None:
        q = _quantity(src["sizeLimit"], f"{path}.sizeLimit", errs)
        if q is not None and q.sign() < 0:
            errs.append(FieldError.forbidden(f"{path}.sizeLimit", "SizeLimit field must be a valid resource quantity"))
    return errs


def _host_path(src: dict, path: str) -> Errs:
    errs: Errs = []
    target = _str(src, "path", path, errs)
    if not target:
        return errs + [FieldError.required(f"{path}.path")]
    errs += _validate_path_no_backsteps(target, f"{path}.path")
    htype = src.get("type")
    if htype is not None and htype not in _HOST_PATH_TYPES:
        errs.append(FieldError.not_supported(f"{path}.type", htype, _HOST_PATH_TYPES))
    return errs


def _secret_volume(src: dict, path: str) -> Errs:
    errs: Errs = []
    if not _str(src, "secretName", path, errs):
        errs.append(FieldError.required(f"{path}.secretName"))
    _file_mode(src, "defaultMode", path, errs)
    for ipath, kp in _items(src, "items", path, errs):
        errs += _key_to_path(kp, ipath)
    return errs


def _config_map_volume(src: dict, path: str) -> Errs:
    errs: Errs = []
    if not _str(src, "name", path, errs):
        errs.append(FieldError.required(f"{path}.name"))
    _file_mode(src, "defaultMode", path, errs)
    for ipath, kp in _items(src, "items", path, errs):
        errs += _key_to_path(kp, ipath)
    return errs


def _downward_api_volume(src: dict, path: str) -> Errs:
    errs: Errs = []
    _file_mode(src, "defaultMode", path, errs)
    for _, f in _items(src, "items", path, errs):
        errs += _downward_api_file(f, path)
    return errs


def _pvc_volume(src: dict, path: str) -> Errs:
    errs: Errs = []
    if not _str(src, "claimName", path, errs):
        errs.append(FieldError.required(f"{path}.claimName"))
    return errs


def _nfs_volume(src: dict, path: str) -> Errs:
    errs: Errs = []
    if not _str(src, "server", path, errs):
        errs.append(FieldError.required(f"{path}.server"))
    target = _str(src, "path", path, errs)
    if not target:
        errs.append(FieldError.required(f"{path}.path"))
    elif not posixpath.isabs(target):
        errs.append(FieldError.invalid(f"{path}.path", target, "must be an absolute path"))
    return errs


def _git_repo_volume(src: dict, path: str) -> Errs:
    errs: Errs = []
    if not _str(src, "repository", path, errs):
        errs.append(FieldError.required(f"{path}.repository"))
    directory = _str(src, "directory", path, errs)
    errs += _validate_path_no_backsteps(directory, f"{path}.directory")
    return errs


def _csi_volume(src: dict, path: str) -> Errs:
    errs: Errs = []
    driver = _str(src, "driver", path, errs)
    if not driver:
        errs.append(FieldError.required(f"{path}.driver"))
    return errs


def _ephemeral_volume(src: dict, path: str) -> Errs:
    if src.get("volumeClaimTemplate") is None:
        return [FieldError.required(f"{path}.volumeClaimTemplate")]
    return []


_VOLUME_CHECKS = {
    "emptyDir": _empty_dir,
    "hostPath": _host_path,
    "secret": _secret_volume,
    "configMap": _config_map_volume,
    "downwardAPI": _downward_api_volume,
    "projected": _projected,
    "persistentVolumeClaim": _pvc_volume,
    "nfs": _nfs_volume,
    "gitRepo": _git_repo_volume,
    "csi": _csi_volume,
    "ephemeral": _ephemeral_volume,
}


def _validate_volumes(spec: dict, path: str, errs: Errs) -> dict[str, dict]:
    """Validate spec.volumes; return the valid ones by name (mounts may only refer to those)."""
    vols: dict[str, dict] = {}
    seen: set[str] = set()
    for vpath, vol in _items(spec, "volumes", path, errs):
        el = _volume_source(vol, vpath)
        name = _str(vol, "name", vpath, el)
        if not name:
            el.append(FieldError.required(f"{vpath}.name"))
        else:
            el += _label(name, f"{vpath}.name")
        if name in seen:
            el.append(FieldError.duplicate(f"{vpath}.name", name))
        if el:
            errs += el
        else:
            seen.add(name)
            vols[name] = vol
    return vols


# --- containers -----------------------------------------------------------------------

_PULL_POLICIES = ("Always", "IfNotPresent", "Never")
_TERMINATION_MESSAGE_POLICIES = ("File", "FallbackToLogsOnError")
_PROTOCOLS = ("SCTP", "TCP", "UDP")
_HTTP_SCHEMES = ("HTTP", "HTTPS")
_MOUNT_PROPAGATIONS = ("Bidirectional", "HostToContainer", "None")
_PROC_MOUNT_TYPES = ("Default", "Unmasked")
_SECCOMP_TYPES = ("Localhost", "RuntimeDefault", "Unconfined")

_STANDARD_CONTAINER_RESOURCES = frozenset({"cpu", "memory", "ephemeral-storage"})
_STANDARD_RESOURCES = _STANDARD_CONTAINER_RESOURCES | frozenset(
    {
        "requests.cpu",
        "requests.memory",
        "requests.ephemeral-storage",
        "limits.cpu",
        "limits.memory",
        "limits.ephemeral-storage",
        "pods",
        "services",
        "replicationcontrollers",
        "resourcequotas",
        "secrets",
        "configmaps",
        "persistentvolumeclaims",
        "requests.storage",
        "services.nodeports",
        "services.loadbalancers",
    }
)
_INTEGER_RESOURCES = frozenset(
    {
        "pods",
        "services",
        "replicationcontrollers",
        "resourcequotas",
        "secrets",
        "configmaps",
        "persistentvolumeclaims",
        "services.nodeports",
        "services.loadbalancers",
    }
)
_QOS_RESOURCES = frozenset({"cpu", "memory"})
_HUGEPAGES_PREFIX = "hugepages-"


def _is_native_resource(name: str) -> bool:
    return "/" not in name or names.RESOURCE_NATIVE_PREFIX in name


def _is_hugepage_resource(name: str) -> bool:
    return name.startswith(_HUGEPAGES_PREFIX)


def _is_extended_resource(name: str) -> bool:
    if _is_native_resource(name) or name.startswith("requests."):
        return False
    return not is_qualified_name("requests." + name)


def _is_overcommit_allowed(name: str) -> bool:
    return _is_native_resource(name) and not _is_hugepage_resource(name)


_GOOD_CONTAINER_RESOURCE_NAMES: set[str] = set()


def _container_resource_name(name: str, path: str) -> Errs:
    if name in _GOOD_CONTAINER_RESOURCE_NAMES:
        return []
    errs = _container_resource_name_problems(name, path)
    if not errs:
        _remember(_GOOD_CONTAINER_RESOURCE_NAMES, name)
    return errs


def _container_resource_name_problems(name: str, path: str) -> Errs:
    errs = _invalid_all(path, name, is_qualified_name(name))
    if errs:
        return errs
    if "/" not in name:
        if (
            name not in _STANDARD_RESOURCES
            and not _is_hugepage_resource(name)
            and not name.startswith("requests." + _HUGEPAGES_PREFIX)
        ):
            return [FieldError.invalid(path, name, "must be a standard resource type or fully qualified")]
        if name not in _STANDARD_CONTAINER_RESOURCES and not _is_hugepage_resource(name):
            return [FieldError.invalid(path, name, "must be a standard resource for containers")]
    elif not _is_native_resource(name) and not _is_extended_resource(name):
        return [FieldError.invalid(path, name, "doesn't follow extended resource name standard")]
    return []


def _hugepage_divisible(name: str, q: Quantity) -> bool:
    try:
        size = Quantity.parse(name[len(_HUGEPAGES_PREFIX) :])
    except QuantityError:
        return False
    if size.sign() <= 0:
        return False
    return q.sign() >= 0 and q.as_fraction() % size.as_fraction() == 0


def _resource_quantities(res: dict, key: str, path: str, errs: Errs) -> dict[str, Quantity]:
    out: dict[str, Quantity] = {}
    values = _dict(res, key, path, errs)
    for name, raw in (values or {}).items():
        fpath = f"{path}.{key}[{name}]"
        errs += _container_resource_name(name, fpath)
        q = _quantity(raw, fpath, errs)
        if q is None:
            continue
        if q.sign() < 0:
            errs.append(FieldError.invalid(fpath, str(q), _NEGATIVE_MSG))
        if (name in _INTEGER_RESOURCES or _is_extended_resource(name)) and q.milli_value() % 1000 != 0:
            errs.append(FieldError.invalid(fpath, str(q), "must be an integer"))
        if _is_hugepage_resource(name) and not _hugepage_divisible(name, q):
            errs.append(FieldError.invalid(fpath, str(q), f"{q} is not positive integer multiple of {name}"))
        out[name] = q
    return out


def _resources(res: dict, path: str) -> Errs:
    errs: Errs = []
    limits = _resource_quantities(res, "limits", path, errs)
    requests = _resource_quantities(res, "requests", path, errs)
    lim_path, req_path = f"{path}.limits", f"{path}.requests"
    for name, q in requests.items():
        limit = limits.get(name)
        if limit is not None:
            if q != limit and not _is_overcommit_allowed(name):
                errs.append(FieldError.invalid(req_path, str(q), f"must be equal to {name} limit of {limit}"))
            elif q > limit:
                errs.append(
                    FieldError.invalid(req_path, str(q), f"must be less than or equal to {name} limit of {limit}")
                )
        elif not _is_overcommit_allowed(name):
            errs.append(FieldError.required(lim_path, "Limit must be set for non overcommitable resources"))
    used = set(limits) | set(requests)
    if any(_is_hugepage_resource(n) for n in used) and not used & _QOS_RESOURCES:
        errs.append(FieldError.forbidden(path, "HugePages require cpu or memory"))
    return errs


def _ports(ctr: dict, path: str) -> Errs:
    errs: Errs = []
    seen: set[str] = set()
    for ppath, port in _items(ctr, "ports", path, errs):
        name = _str(port, "name", ppath, errs)
        if name:
            msgs = is_valid_port_name(name)
            if msgs:
                errs += _invalid_all(f"{ppath}.name", name, msgs)
            elif name in seen:
                errs.append(FieldError.duplicate(f"{ppath}.name", name))
            else:
                seen.add(name)
        if port.get("containerPort") in (None, 0):
            errs.append(FieldError.required(f"{ppath}.containerPort"))
        else:
            cport = _int(port, "containerPort", ppath, errs)
            if cport is not None:
                errs += _invalid_all(f"{ppath}.containerPort", cport, _is_valid_port_num(cport))
        hport = _int(port, "hostPort", ppath, errs)
        if hport:
            errs += _invalid_all(f"{ppath}.hostPort", hport, _is_valid_port_num(hport))
        proto = _str(port, "protocol", ppath, errs)
        if proto and proto not in _PROTOCOLS:
            errs.append(FieldError.not_supported(f"{ppath}.protocol", proto, _PROTOCOLS))
    return errs


def _env(ctr: dict, path: str) -> Errs:
    errs: Errs = []
    for epath, ev in _items(ctr, "env", path, errs):
        name = _str(ev, "name", epath, errs)
        if not name:
            errs.append(FieldError.required(f"{epath}.name"))
        else:
            msgs = is_env_var_name(name)
            if msgs:
                errs += _invalid_all(f"{epath}.name", name, msgs)
        value_from = ev.get("valueFrom")
        if value_from is None:
            continue
        value_from = _dict(ev, "valueFrom", epath, errs)
        if value_from is None:
            continue
        vpath = f"{epath}.valueFrom"
        count = 0
        ref = _dict(value_from, "fieldRef", vpath, errs)
        if ref is not None:
            count += 1
            errs += _object_field_selector(ref, _ENV_DOWNWARD_FIELDS, f"{vpath}.fieldRef")
        ref = _dict(value_from, "resourceFieldRef", vpath, errs)
        if ref is not None:
            count += 1
            errs += _resource_field_selector(ref, f"{vpath}.resourceFieldRef", False)
        for kind in ("configMapKeyRef", "secretKeyRef"):
            ref = _dict(value_from, kind, vpath, errs)
            if ref is None:
                continue
            count += 1
            kpath = f"{vpath}.{kind}"
            rname = _str(ref, "name", kpath, errs)
            errs += _invalid_all(f"{kpath}.name", rname, name_rule("subdomain")(rname, False))
            key = _str(ref, "key", kpath, errs)
            if not key:
                errs.append(FieldError.required(f"{kpath}.key"))
            else:
                errs += _invalid_all(f"{kpath}.key", key, is_config_map_key(key))
        if count == 0:
            errs.append(
                FieldError.invalid(
                    vpath,
                    "",
                    "must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`",
                )
            )
        elif ev.get("value"):
            errs.append(FieldError.invalid(vpath, "", "may not be specified when `value` is not empty"))
        elif count > 1:
            errs.append(FieldError.invalid(vpath, "", "may not have more than one field specified at a time"))
    return errs


def _env_from(ctr: dict, path: str) -> Errs:
    errs: Errs = []
    list_path = f"{path}.envFrom"
    for epath, ev in _items(ctr, "envFrom", path, errs):
        prefix = _str(ev, "prefix", epath, errs)
        if prefix:
            errs += _invalid_all(f"{epath}.prefix", prefix, is_env_var_name(prefix))
        count = 0
        for kind in ("configMapRef", "secretRef"):
            ref = _dict(ev, kind, epath, errs)
            if ref is None:
                continue
            count += 1
            rname = _str(ref, "name", f"{epath}.{kind}", errs)
            if not rname:
                errs.append(FieldError.required(f"{epath}.{kind}.name"))
            else:
                errs += _invalid_all(f"{epath}.{kind}.name", rname, name_rule("subdomain")(rname, True))
        if count == 0:
            errs.append(FieldError.invalid(list_path, "", "must specify one of: `configMapRef` or `secretRef`"))
        elif count > 1:
            errs.append(FieldError.invalid(list_path, "", "may not have more than one field specified at a time"))
    return errs


def _is_privileged(ctr: dict) -> bool:
    sc = ctr.get("securityContext")
    return isinstance(sc, dict) and sc.get("privileged") is True


def _volume_mounts(ctr: dict, vols: dict[str, dict], path: str) -> Errs:
    errs: Errs = []
    mounts_path = f"{path}.volumeMounts"
    devices = {d.get("name"): d.get("devicePath") for _, d in _items(ctr, "volumeDevices", path, [])}
    device_paths = set(devices.values())
    mount_points: set[str] = set()
    for mpath, m in _items(ctr, "volumeMounts", path, errs):
        name = _str(m, "name", mpath, errs)
        if not name:
            errs.append(FieldError.required(f"{mpath}.name"))
        if name not in vols:
            errs.append(_not_found(f"{mpath}.name", name))
        mount_path = _str(m, "mountPath", mpath, errs)
        if not mount_path:
            errs.append(FieldError.required(f"{mpath}.mountPath"))
        if mount_path in mount_points:
            errs.append(FieldError.invalid(f"{mpath}.mountPath", mount_path, "must be unique"))
        mount_points.add(mount_path)
        if name and name in devices:
            errs.append(FieldError.invalid(f"{mpath}.name", name, "must not already exist in volumeDevices"))
        if mount_path and mount_path in device_paths:
            errs.append(
                FieldError.invalid(
                    f"{mpath}.mountPath", mount_path, "must not already exist as a path in volumeDevices"
                )
            )
        sub_path = _str(m, "subPath", mpath, errs)
        if sub_path:
            errs += _validate_local_descending_path(sub_path, f"{mounts_path}.subPath")
        sub_expr = _str(m, "subPathExpr", mpath, errs)
        if sub_expr:
            if sub_path:
                errs.append(
                    FieldError.invalid(
                        f"{mpath}.subPathExpr", sub_expr, "subPathExpr and subPath are mutually exclusive"
                    )
                )
            errs += _validate_local_descending_path(sub_expr, f"{mounts_path}.subPathExpr")
        prop = m.get("mountPropagation")
        if prop is not None:
            ppath = f"{mounts_path}.mountPropagation"
            if prop not in _MOUNT_PROPAGATIONS:
                errs.append(FieldError.not_supported(ppath, prop, _MOUNT_PROPAGATIONS))
            if prop == "Bidirectional" and not _is_privileged(ctr):
                errs.append(
                    FieldError.forbidden(
                        ppath, "Bidirectional mount propagation is available only to privileged containers"
                    )
                )
    return errs


def _volume_devices(ctr: dict, vols: dict[str, dict], path: str) -> Errs:
    errs: Errs = []
    mounts = {m.get("name"): m.get("mountPath") for _, m in _items(ctr, "volumeMounts", path, [])}
    mount_paths = set(mounts.values())
    seen_names: set[str] = set()
    seen_paths: set[str] = set()
    for dpath, d in _items(ctr, "volumeDevices", path, errs):
        name = _str(d, "name", dpath, errs)
        dev_path = _str(d, "devicePath", dpath, errs)
        vol = vols.get(name)
        if not name:
            errs.append(FieldError.required(f"{dpath}.name"))
        if name in seen_names:
            errs.append(FieldError.invalid(f"{dpath}.name", name, "must be unique"))
        if vol is not None and vol.get("persistentVolumeClaim") is None and vol.get("ephemeral") is None:
            errs.append(
                FieldError.invalid(
                    f"{dpath}.name",
                    name,
                    "can only use volume source type of PersistentVolumeClaim or Ephemeral for block mode",
                )
            )
        if vol is None:
            errs.append(_not_found(f"{dpath}.name", name))
        if not dev_path:
            errs.append(FieldError.required(f"{dpath}.devicePath"))
        if dev_path in seen_paths:
            errs.append(FieldError.invalid(f"{dpath}.devicePath", dev_path, "must be unique"))
        if dev_path and ".." in dev_path.split("/"):
            errs.append(FieldError.invalid(f"{dpath}.devicePath", dev_path, "can not contain backsteps ('..')"))
        else:
            seen_paths.add(dev_path)
        if name and name in mounts:
            errs.append(FieldError.invalid(f"{dpath}.name", name, "must not already exist in volumeMounts"))
        if dev_path and dev_path in mount_paths:
            errs.append(
                FieldError.invalid(f"{dpath}.devicePath", dev_path, "must not already exist as a path in volumeMounts")
            )
        if name:
            seen_names.add(name)
    return errs


def _handler(h: dict, path: str, kinds: tuple[str, ...]) -> Errs:
    """Exactly one handler among ``kinds`` (upstream validateHandler)."""
    errs: Errs = []
    count = 0
    for kind in kinds:
        action = h.get(kind)
        if action is None:
            continue
        apath = f"{path}.{kind}"
        if count > 0:
            errs.append(FieldError.forbidden(apath, "may not specify more than 1 handler type"))
            continue
        count += 1
        if not isinstance(action, dict):
            errs.append(FieldError.type_invalid(apath, action, "must be an object"))
            continue
        if kind == "exec":
            if not _list(action, "command", apath, errs):
                errs.append(FieldError.required(f"{apath}.command"))
        elif kind == "httpGet":
            # An empty path is defaulted to "/", so only its type is checked.
            _str(action, "path", apath, errs)
            errs += _port_num_or_name(action.get("port"), f"{apath}.port")
            scheme = _str(action, "scheme", apath, errs)
            if scheme and scheme not in _HTTP_SCHEMES:
                errs.append(FieldError.not_supported(f"{apath}.scheme", scheme, _HTTP_SCHEMES))
            for _, header in _items(action, "httpHeaders", apath, errs):
                hname = header.get("name", "")
                if isinstance(hname, str):
                    errs += _invalid_all(f"{apath}.httpHeaders", hname, _is_http_header_name(hname))
        elif kind == "tcpSocket":
            errs += _port_num_or_name(action.get("port"), f"{apath}.port")
        elif kind == "grpc":
            port = action.get("port", 0)
            if not _is_int(port):
                errs.append(FieldError.type_invalid(f"{apath}.port", port, "must be an integer"))
            else:
                errs += _invalid_all(f"{apath}.port", port, _is_valid_port_num(port))
        elif kind == "sleep":
            seconds = action.get("seconds")
            if not _is_int(seconds) or seconds <= 0:
                errs.append(FieldError.invalid(f"{apath}.seconds", seconds, "must be greater than 0"))
    if count == 0:
        errs.append(FieldError.required(path, "must specify a handler type"))
    return errs


_PROBE_HANDLERS = ("exec", "httpGet", "tcpSocket", "grpc")
_LIFECYCLE_HANDLERS = ("exec", "httpGet", "tcpSocket", "sleep")


def _probe(probe: dict, path: str) -> Errs:
    errs = _handler(probe, path, _PROBE_HANDLERS)
    for key in ("initialDelaySeconds", "timeoutSeconds", "periodSeconds", "successThreshold", "failureThreshold"):
        v = _int(probe, key, path, errs)
        if v is not None and v < 0:
            errs.append(FieldError.invalid(f"{path}.{key}", v, _NEGATIVE_MSG))
    tgps = _int(probe, "terminationGracePeriodSeconds", path, errs)
    if tgps is not None and tgps <= 0:
        errs.append(FieldError.invalid(f"{path}.terminationGracePeriodSeconds", tgps, "must be greater than 0"))
    return errs


def _probes_and_lifecycle(ctr: dict, path: str) -> Errs:
    """The rules for regular containers' lifecycle and probes."""
    errs: Errs = []
    lifecycle = _dict(ctr, "lifecycle", path, errs)
    if lifecycle is not None:
        for hook in ("postStart", "preStop"):
            h = _dict(lifecycle, hook, f"{path}.lifecycle", errs)
            if h is not None:
                errs += _handler(h, f"{path}.lifecycle.{hook}", _LIFECYCLE_HANDLERS)
    for kind in ("livenessProbe", "readinessProbe", "startupProbe"):
        probe = _dict(ctr, kind, path, errs)
        if probe is None:
            continue
        ppath = f"{path}.{kind}"
        errs += _probe(probe, ppath)
        if kind == "readinessProbe" and probe.get("terminationGracePeriodSeconds") is not None:
            errs.append(
                FieldError.invalid(
                    f"{ppath}.terminationGracePeriodSeconds",
                    probe["terminationGracePeriodSeconds"],
                    "must not be set for readinessProbes",
                )
            )
        if kind != "readinessProbe":
            st = probe.get("successThreshold")
            if _is_int(st) and st not in (0, 1):  # 0 is "unset": defaulted to 1
                errs.append(FieldError.invalid(f"{ppath}.successThreshold", st, "must be 1"))
    return errs


def _id_field(obj: dict, key: str, path: str, errs: Errs) -> None:
    v = _int(obj, key, path, errs)
    if v is not None and not 0 <= v <= MAX_INT32:
        errs.append(FieldError.invalid(f"{path}.{key}", v, _range_error(0, MAX_INT32)))


def _seccomp(sc: dict, path: str) -> Errs:
    errs: Errs = []
    sp = _dict(sc, "seccompProfile", path, errs)
    if sp is None:
        return errs
    spath = f"{path}.seccompProfile"
    stype = _str(sp, "type", spath, errs)
    if not stype:
        errs.append(FieldError.required(f"{spath}.type", "type is required when seccompProfile is set"))
    elif stype not in _SECCOMP_TYPES:
        errs.append(FieldError.not_supported(f"{spath}.type", stype, _SECCOMP_TYPES))
    local = sp.get("localhostProfile")
    if stype == "Localhost":
        if local is None:
            errs.append(FieldError.required(f"{spath}.localhostProfile", "must be set when seccomp type is Localhost"))
        elif isinstance(local, str):
            errs += _validate_local_descending_path(local, f"{spath}.localhostProfile")
    elif local is not None:
        errs.append(
            FieldError.invalid(f"{spath}.localhostProfile", sp, "can only be set when seccomp type is Localhost")
        )
    return errs


def _container_security_context(ctr: dict, path: str) -> Errs:
    errs: Errs = []
    sc = _dict(ctr, "securityContext", path, errs)
    if sc is None:
        return errs
    spath = f"{path}.securityContext"
    _id_field(sc, "runAsUser", spath, errs)
    _id_field(sc, "runAsGroup", spath, errs)
    proc = sc.get("procMount")
    if proc is not None and proc not in _PROC_MOUNT_TYPES:
        errs.append(FieldError.not_supported(f"{spath}.procMount", proc, _PROC_MOUNT_TYPES))
    errs += _seccomp(sc, spath)
    if sc.get("allowPrivilegeEscalation") is False:
        if sc.get("privileged") is True:
            errs.append(
                FieldError.invalid(spath, sc, "cannot set `allowPrivilegeEscalation` to false and `privileged` to true")
            )
        caps = sc.get("capabilities")
        if isinstance(caps, dict) and isinstance(caps.get("add"), list):
            for cap in caps["add"]:
                if cap == "CAP_SYS_ADMIN":
                    errs.append(
                        FieldError.invalid(
                            spath,
                            sc,
                            "cannot set `allowPrivilegeEscalation` to false and `capabilities.Add` CAP_SYS_ADMIN",
                        )
                    )
    return errs


def _container_common(ctr: dict, vols: dict[str, dict], path: str) -> Errs:
    """What applies to every container type (upstream validateContainerCommon)."""
    errs: Errs = []
    name = _str(ctr, "name", path, errs)
    if not name:
        errs.append(FieldError.required(f"{path}.name"))
    else:
        errs += _label(name, f"{path}.name")
    image = _str(ctr, "image", path, errs)
    if not image:
        errs.append(FieldError.required(f"{path}.image"))
    policy = _str(ctr, "terminationMessagePolicy", path, errs)
    if policy and policy not in _TERMINATION_MESSAGE_POLICIES:
        errs.append(FieldError.not_supported(f"{path}.terminationMessagePolicy", policy, _TERMINATION_MESSAGE_POLICIES))
    for key in ("command", "args"):
        for i, item in enumerate(_list(ctr, key, path, errs)):
            if not isinstance(item, str):
                errs.append(FieldError.type_invalid(f"{path}.{key}[{i}]", item, "must be a string"))
    _str(ctr, "workingDir", path, errs)
    errs += _ports(ctr, path)
    errs += _env(ctr, path)
    errs += _env_from(ctr, path)
    errs += _volume_mounts(ctr, vols, path)
    errs += _volume_devices(ctr, vols, path)
    pull = _str(ctr, "imagePullPolicy", path, errs)
    if pull and pull not in _PULL_POLICIES:
        errs.append(FieldError.not_supported(f"{path}.imagePullPolicy", pull, _PULL_POLICIES))
    res = _dict(ctr, "resources", path, errs)
    if res is not None:
        errs += _resources(res, f"{path}.resources")
    errs += _container_security_context(ctr, path)
    return errs


def _container_only_for_pod(ctr: dict, path: str) -> Errs:
    image = ctr.get("image")
    if isinstance(image, str) and image != image.strip():
        return [FieldError.invalid(f"{path}.image", image, "must not have leading or trailing whitespace")]
    return []


def _host_port_conflicts(containers: list[tuple[str, dict]]) -> Errs:
    errs: Errs = []
    seen: set[str] = set()
    for cpath, ctr in containers:
        for ppath, port in _items(ctr, "ports", cpath, []):
            hport = port.get("hostPort")
            if not _is_int(hport) or hport == 0:
                continue
            key = f"{port.get('protocol') or 'TCP'}/{port.get('hostIP') or ''}/{hport}"
            if key in seen:
                errs.append(FieldError.duplicate(f"{ppath}.hostPort", key))
            seen.add(key)
    return errs


_EPHEMERAL_FORBIDDEN_FIELDS = ("ports", "resources", "livenessProbe", "readinessProbe", "startupProbe", "lifecycle")


def _validate_containers(spec: dict, vols: dict[str, dict], path: str, errs: Errs) -> None:
    containers = _items(spec, "containers", path, errs)
    inits = _items(spec, "initContainers", path, errs)
    ephemerals = _items(spec, "ephemeralContainers", path, errs)
    if not containers:
        errs.append(FieldError.required(f"{path}.containers"))
    names_seen: set[str] = set()
    for cpath, ctr in containers:
        errs += _container_common(ctr, vols, cpath)
        name = ctr.get("name")
        if name in names_seen:
            errs.append(FieldError.duplicate(f"{cpath}.name", name))
        elif isinstance(name, str):
            names_seen.add(name)
        errs += _probes_and_lifecycle(ctr, cpath)
    errs += _host_port_conflicts(containers)
    regular = set(names_seen)
    for cpath, ctr in inits:
        errs += _container_common(ctr, vols, cpath)
        name = ctr.get("name")
        if name in names_seen:
            errs.append(FieldError.duplicate(f"{cpath}.name", name))
        elif isinstance(name, str) and name:
            names_seen.add(name)
        # Init containers run one by one, so only conflicts within one count.
        errs += _host_port_conflicts([(cpath, ctr)])
        for key in ("lifecycle", "livenessProbe", "readinessProbe", "startupProbe"):
            if ctr.get(key) is not None:
                errs.append(FieldError.forbidden(f"{cpath}.{key}", _INIT_FORBIDDEN_MSG))
    for cpath, ctr in ephemerals:
        errs += _container_common(ctr, vols, cpath)
        errs += _container_only_for_pod(ctr, cpath)
        name = ctr.get("name")
        if name in names_seen:
            errs.append(FieldError.duplicate(f"{cpath}.name", name))
        elif isinstance(name, str):
            names_seen.add(name)
        target = ctr.get("targetContainerName")
        if target and target not in regular and target not in {c.get("name") for _, c in inits}:
            errs.append(_not_found(f"{cpath}.targetContainerName", target))
        for key in _EPHEMERAL_FORBIDDEN_FIELDS:
            if ctr.get(key) not in (None, {}, []):
                errs.append(FieldError.forbidden(f"{cpath}.{key}", _EPHEMERAL_FORBIDDEN_MSG))
        for mpath, m in _items(ctr, "volumeMounts", cpath, []):
            for key in ("subPath", "subPathExpr"):
                if m.get(key):
                    errs.append(FieldError.forbidden(f"{mpath}.{key}", _EPHEMERAL_FORBIDDEN_MSG))


# --- pod-level fields -----------------------------------------------------------------

_RESTART_POLICIES = ("Always", "OnFailure", "Never")
_DNS_POLICIES = ("ClusterFirstWithHostNet", "ClusterFirst", "Default", "None")
_TOLERATION_OPERATORS = ("Equal", "Exists")
_TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
_FS_GROUP_CHANGE_POLICIES = ("OnRootMismatch", "Always")
_PREEMPTION_POLICIES = ("PreemptLowerPriority", "Never")
_WHEN_UNSATISFIABLE = ("DoNotSchedule", "ScheduleAnyway")


def _dns_config(spec: dict, path: str, errs: Errs) -> None:
    cfg = _dict(spec, "dnsConfig", path, errs)
    cpath = f"{path}.dnsConfig"
    if spec.get("dnsPolicy") == "None":
        if cfg is None:
            errs.append(FieldError.required(cpath, "must provide `dnsConfig` when `dnsPolicy` is None"))
            return
        if not cfg.get("nameservers"):
            errs.append(
                FieldError.required(
                    f"{cpath}.nameservers", "must provide at least one DNS nameserver when `dnsPolicy` is None"
                )
            )
            return
    if cfg is None:
        return
    servers = _list(cfg, "nameservers", cpath, errs)
    if len(servers) > MAX_DNS_NAMESERVERS:
        errs.append(
            FieldError.invalid(
                f"{cpath}.nameservers", servers, f"must not have more than {MAX_DNS_NAMESERVERS} nameservers"
            )
        )
    for i, ns in enumerate(servers):
        if not isinstance(ns, str) or not _is_valid_ip(ns):
            errs.append(FieldError.invalid(f"{cpath}.nameservers[{i}]", ns, "must be valid IP address"))
    searches = _list(cfg, "searches", cpath, errs)
    if len(searches) > MAX_DNS_SEARCH_PATHS:
        errs.append(
            FieldError.invalid(
                f"{cpath}.searches", searches, f"must not have more than {MAX_DNS_SEARCH_PATHS} search paths"
            )
        )
    if len(" ".join(s for s in searches if isinstance(s, str))) > MAX_DNS_SEARCH_LIST_CHARS:
        errs.append(
            FieldError.invalid(
                f"{cpath}.searches",
                searches,
                f"must not have more than {MAX_DNS_SEARCH_LIST_CHARS} characters (including spaces) in the search list",
            )
        )
    for i, search in enumerate(searches):
        if not isinstance(search, str):
            errs.append(FieldError.type_invalid(f"{cpath}.searches[{i}]", search, "must be a string"))
            continue
        search = search.removesuffix(".")
        errs += _subdomain(search, f"{cpath}.searches[{i}]")
    for opath, opt in _items(cfg, "options", cpath, errs):
        if not opt.get("name"):
            errs.append(FieldError.required(opath, "must not be empty"))


def validate_tolerations(tolerations: list, path: str) -> Errs:
    """Upstream ValidateTolerations."""
    errs: Errs = []
    for i, t in enumerate(tolerations):
        tpath = f"{path}[{i}]"
        if not isinstance(t, dict):
            errs.append(FieldError.type_invalid(tpath, t, "must be an object"))
            continue
        key = _str(t, "key", tpath, errs)
        if key:
            errs += validate_label_key(key, f"{tpath}.key")
        op = _str(t, "operator", tpath, errs)
        if not key and op != "Exists":
            errs.append(
                FieldError.invalid(
                    f"{tpath}.operator",
                    op,
                    'operator must be Exists when `key` is empty, which means "match all values and all keys"',
                )
            )
        effect = _str(t, "effect", tpath, errs)
        if t.get("tolerationSeconds") is not None and effect != "NoExecute":
            errs.append(
                FieldError.invalid(
                    f"{tpath}.effect", effect, "effect must be 'NoExecute' when `tolerationSeconds` is set"
                )
            )
        value = _str(t, "value", tpath, errs)
        if op in ("Equal", ""):
            msgs = is_valid_label_value(value)
            if msgs:
                errs.append(FieldError.invalid(f"{tpath}.operator", value, ";".join(msgs)))
        elif op == "Exists":
            if value:
                errs.append(
                    FieldError.invalid(f"{tpath}.operator", t, "value must be empty when `operator` is 'Exists'")
                )
        else:
            errs.append(FieldError.not_supported(f"{tpath}.operator", op, _TOLERATION_OPERATORS))
        if effect and effect not in _TAINT_EFFECTS:
            errs.append(FieldError.not_supported(f"{tpath}.effect", effect, _TAINT_EFFECTS))
    return errs


def _sysctl_namespace(name: str) -> str:
    # Names may use '/' as the separator; upstream normalises before matching.
    first = min((i for i in (name.find("."), name.find("/")) if i >= 0), default=-1)
    if first >= 0 and name[first] == "/":
        name = name.translate(str.maketrans("./", "/."))
    if name.startswith("net."):
        return "net"
    if name == "kernel.sem" or name.startswith(("kernel.shm", "kernel.msg", "fs.mqueue.")):
        return "ipc"
    return ""


def _pod_security_context(spec: dict, path: str, errs: Errs) -> None:
    sc = _dict(spec, "securityContext", path, errs)
    host_network = spec.get("hostNetwork") is True
    if host_network:
        for cpath, ctr in _items(spec, "containers", path, []):
            for ppath, port in _items(ctr, "ports", cpath, []):
                hport, cport = port.get("hostPort"), port.get("containerPort")
                # An unset hostPort is defaulted to containerPort under hostNetwork.
                if _is_int(hport) and hport != 0 and hport != cport:
                    errs.append(
                        FieldError.invalid(
                            f"{ppath}.containerPort", cport, "must match `hostPort` when `hostNetwork` is true"
                        )
                    )
    if sc is None:
        return
    spath = f"{path}.securityContext"
    _id_field(sc, "fsGroup", spath, errs)
    _id_field(sc, "runAsUser", spath, errs)
    _id_field(sc, "runAsGroup", spath, errs)
    for i, gid in enumerate(_list(sc, "supplementalGroups", spath, errs)):
        if not _is_int(gid) or not 0 <= gid <= MAX_INT32:
            errs.append(FieldError.invalid(f"{spath}.supplementalGroups[{i}]", gid, _range_error(0, MAX_INT32)))
    share = sc.get("shareProcessNamespace")
    if share is True and spec.get("hostPID") is True:
        errs.append(
            FieldError.invalid(
                f"{spath}.shareProcessNamespace", share, "ShareProcessNamespace and HostPID cannot both be enabled"
            )
        )
    seen: set[str] = set()
    for i, (_, s) in enumerate(_items(sc, "sysctls", spath, errs)):
        npath = f"{spath}.sysctls[{i}].name"
        name = _str(s, "name", f"{spath}.sysctls[{i}]", errs)
        if not name:
            errs.append(FieldError.required(npath))
        elif len(name) > SYSCTL_MAX_LENGTH or not _SYSCTL_RE.match(name):
            errs.append(
                FieldError.invalid(
                    npath,
                    name,
                    f"must have at most {SYSCTL_MAX_LENGTH} characters and match regex {_SYSCTL_RE.pattern}",
                )
            )
        elif name in seen:
            errs.append(FieldError.duplicate(npath, name))
        ns = _sysctl_namespace(name)
        if host_network and ns == "net":
            errs.append(FieldError.invalid(npath, name, "may not be specified when 'hostNetwork' is true"))
        elif spec.get("hostIPC") is True and ns == "ipc":
            errs.append(FieldError.invalid(npath, name, "may not be specified when 'hostIPC' is true"))
        seen.add(name)
    policy = sc.get("fsGroupChangePolicy")
    if policy is not None and policy not in _FS_GROUP_CHANGE_POLICIES:
        errs.append(FieldError.not_supported(f"{spath}.fsGroupChangePolicy", policy, _FS_GROUP_CHANGE_POLICIES))
    errs += _seccomp(sc, spath)


def _topology_spread(spec: dict, path: str, errs: Errs) -> None:
    items = _items(spec, "topologySpreadConstraints", path, errs)
    for i, (cpath, c) in enumerate(items):
        skew = c.get("maxSkew")
        if not _is_int(skew) or skew <= 0:
            errs.append(FieldError.invalid(f"{cpath}.maxSkew", skew, "must be greater than zero"))
        if not c.get("topologyKey"):
            errs.append(FieldError.required(f"{cpath}.topologyKey", "can not be empty"))
        when = c.get("whenUnsatisfiable")
        if when not in _WHEN_UNSATISFIABLE:
            errs.append(FieldError.not_supported(f"{cpath}.whenUnsatisfiable", when, _WHEN_UNSATISFIABLE))
        for _, later in items[i + 1 :]:
            if later.get("topologyKey") == c.get("topologyKey") and later.get("whenUnsatisfiable") == when:
                errs.append(
                    FieldError.duplicate(
                        f"{cpath}.{{topologyKey, whenUnsatisfiable}}", f"{{{c.get('topologyKey')}, {when}}}"
                    )
                )
                break


def validate_pod_spec(spec: dict, path: str = "spec") -> list[FieldError]:
    """Validate a PodSpec (upstream ValidatePodSpec): shared by pods and pod templates."""
    if not isinstance(spec, dict):
        return [FieldError.required(path)]
    errs: Errs = []
    vols = _validate_volumes(spec, path, errs)
    _validate_containers(spec, vols, path, errs)
    _pod_security_context(spec, path, errs)

    restart = _str(spec, "restartPolicy", path, errs)
    if restart and restart not in _RESTART_POLICIES:
        errs.append(FieldError.not_supported(f"{path}.restartPolicy", restart, _RESTART_POLICIES))
    dns = _str(spec, "dnsPolicy", path, errs)
    if dns and dns not in _DNS_POLICIES:
        errs.append(FieldError.not_supported(f"{path}.dnsPolicy", dns, _DNS_POLICIES))
    selector = _str_map(spec, "nodeSelector", path, errs)
    errs += validate_labels(selector, f"{path}.nodeSelector")
    _dns_config(spec, path, errs)
    for i, (_, gate) in enumerate(_items(spec, "readinessGates", path, errs)):
        ctype = gate.get("conditionType", "")
        gpath = f"{path}.readinessGates[{i}].conditionType"
        errs += _invalid_all(gpath, ctype, is_qualified_name(ctype if isinstance(ctype, str) else ""))
    _topology_spread(spec, path, errs)

    for key in ("serviceAccountName", "nodeName", "priorityClassName"):
        value = _str(spec, key, path, errs)
        if value:
            errs += _subdomain(value, f"{path}.{key}")
    runtime_class = spec.get("runtimeClassName")
    if runtime_class is not None:
        errs += _subdomain(runtime_class if isinstance(runtime_class, str) else "", f"{path}.runtimeClassName")
    preemption = spec.get("preemptionPolicy")
    if preemption is not None and preemption not in _PREEMPTION_POLICIES:
        errs.append(FieldError.not_supported(f"{path}.preemptionPolicy", preemption, _PREEMPTION_POLICIES))

    deadline = _int(spec, "activeDeadlineSeconds", path, errs)
    if deadline is not None and not 1 <= deadline <= MAX_INT32:
        errs.append(FieldError.invalid(f"{path}.activeDeadlineSeconds", deadline, _range_error(1, MAX_INT32)))
    grace = _int(spec, "terminationGracePeriodSeconds", path, errs)
    if grace is not None and grace < 0:
        errs.append(FieldError.invalid(f"{path}.terminationGracePeriodSeconds", grace, _NEGATIVE_MSG))
    for key in ("hostname", "subdomain"):
        value = _str(spec, key, path, errs)
        if value:
            errs += _label(value, f"{path}.{key}")
    tolerations = _list(spec, "tolerations", path, errs)
    if tolerations:
        errs += validate_tolerations(tolerations, f"{path}.tolerations")
    for _, alias in _items(spec, "hostAliases", path, errs):
        ip = alias.get("ip", "")
        if not isinstance(ip, str) or not _is_valid_ip(ip):
            errs.append(FieldError.invalid(f"{path}.hostAliases.ip", ip, "must be valid IP address"))
        for hostname in alias.get("hostnames") or []:
            errs += _subdomain(hostname if isinstance(hostname, str) else "", f"{path}.hostAliases.hostnames")
    return errs


# --- whole pods -----------------------------------------------------------------------


def _pod_body(pod: dict) -> Errs:
    """Upstream validatePodMetadataAndSpec without the ObjectMeta part."""
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return [FieldError.required("spec")]
    meta = dict_at(pod, "metadata")
    errs = _pod_specific_annotations(meta.get("annotations"), spec, "metadata.annotations")
    errs += validate_pod_spec(spec, "spec")
    if not spec.get("serviceAccountName"):
        for vpath, vol in _items(spec, "volumes", "spec", []):
            projected = vol.get("projected")
            if not isinstance(projected, dict):
                continue
            for spath, source in _items(projected, "sources", f"{vpath}.projected", []):
                if source.get("serviceAccountToken") is not None:
                    errs.append(
                        FieldError.forbidden(
                            f"{spath}.serviceAccountToken", "must not be specified when serviceAccountName is not set"
                        )
                    )
    for key in ("containers", "initContainers"):
        for cpath, ctr in _items(spec, key, "spec", []):
            errs += _container_only_for_pod(ctr, cpath)
    return errs


def validate_pod(pod: dict, *, include_metadata: bool = True) -> list[FieldError]:
    """Create-time validation of a whole Pod (upstream ValidatePodCreate).

    ``include_metadata=False`` leaves the ObjectMeta rules to a caller that
    already applies them (the API server's generic strategy).
    """
    if not isinstance(pod, dict):
        return [FieldError.type_invalid("", pod, "must be an object")]
    errs = validate_pod_metadata(pod.get("metadata")) if include_metadata else []
    errs += _pod_body(pod)
    spec = pod.get("spec")
    if isinstance(spec, dict) and spec.get("ephemeralContainers"):
        errs.append(FieldError.forbidden("spec.ephemeralContainers", "cannot be set on create"))
    return errs


# --- updates --------------------------------------------------------------------------

_QUANTITY_MAP_KEYS = frozenset({"limits", "requests", "overhead"})
_QUANTITY_KEYS = frozenset({"sizeLimit", "divisor"})


def _canonical_quantity(value: Any) -> Any:
    try:
        return parse_quantity(value).canonical()
    except QuantityError:
        return value


def _semantic(value: Any, key: str = "") -> Any:
    """A normal form in which Go's semantic equality holds: zero values dropped, quantities canonical."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if key in _QUANTITY_MAP_KEYS:
                v = _canonical_quantity(v)
            elif k in _QUANTITY_KEYS and v is not None:
                v = _canonical_quantity(v)
            else:
                v = _semantic(v, k)
            if v is None or v == "" or v == [] or v == {} or v is False or (_is_int(v) and v == 0):
                continue
            out[k] = v
        return out
    if isinstance(value, list):
        return [_semantic(v) for v in value]
    return value


def _diff(old: Any, new: Any, path: str, out: list[str], limit: int = 20) -> None:
    if len(out) >= limit or old == new:
        return
    if isinstance(old, dict) and isinstance(new, dict):
        for k in sorted(set(old) | set(new)):
            _diff(old.get(k), new.get(k), f"{path}.{k}", out, limit)
        return
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for i, (a, b) in enumerate(zip(old, new)):
            _diff(a, b, f"{path}[{i}]", out, limit)
        return

    def dump(v):
        return "<unset>" if v is None else json.dumps(v, sort_keys=True, separators=(",", ":"))

    out.append(f"- {path}: {dump(old)}\n+ {path}: {dump(new)}")


def _container_updates(new: list, old: list, path: str) -> tuple[Errs, bool]:
    if len(new) != len(old):
        return [FieldError.forbidden(path, "pod updates may not add or remove containers")], True
    errs: Errs = []
    for i, ctr in enumerate(new):
        image = ctr.get("image") if isinstance(ctr, dict) else None
        if not image:
            errs.append(FieldError.required(f"{path}[{i}].image"))
        elif isinstance(image, str) and image != image.strip():
            errs.append(FieldError.invalid(f"{path}[{i}].image", image, "must not have leading or trailing whitespace"))
    return errs, False


def _only_added_tolerations(new: list, old: list, path: str) -> Errs:
    for o in old:
        if not isinstance(o, dict) or o in new:  # kept as it was: the usual case, no normalising
            continue
        found = False
        for n in new:
            if not isinstance(n, dict):
                continue
            clone = dict(o)
            clone["tolerationSeconds"] = n.get("tolerationSeconds")
            if _semantic(clone) == _semantic(n):
                found = True
                break
        if not found:
            return [FieldError.forbidden(path, "existing toleration can not be modified except its tolerationSeconds")]
    return validate_tolerations(new, path)


def validate_pod_update(new: dict, old: dict, *, include_metadata: bool = True) -> list[FieldError]:
    """Update validation (upstream ValidatePodUpdate): only a few spec fields may change."""
    if not isinstance(new, dict) or not isinstance(old, dict):
        return [FieldError.type_invalid("", new, "must be an object")]
    errs: Errs = []
    new_meta = dict_at(new, "metadata")
    old_meta = dict_at(old, "metadata")
    if include_metadata:
        errs += validate_pod_metadata(new_meta)
        for key in ("name", "namespace", "uid"):
            if old_meta.get(key) and new_meta.get(key) != old_meta.get(key):
                errs.append(FieldError.invalid(f"metadata.{key}", new_meta.get(key), "field is immutable"))
    errs += _pod_body(new)
    errs += _pod_specific_annotation_updates(
        new_meta.get("annotations"), old_meta.get("annotations"), "metadata.annotations"
    )
    nspec = dict_at(new, "spec")
    ospec = dict_at(old, "spec")

    for key in ("containers", "initContainers"):
        nlist, olist = nspec.get(key) or [], ospec.get(key) or []
        if not isinstance(nlist, list) or not isinstance(olist, list):
            continue
        cerrs, stop = _container_updates(nlist, olist, f"spec.{key}")
        errs += cerrs
        if stop:
            return errs

    ndl, odl = nspec.get("activeDeadlineSeconds"), ospec.get("activeDeadlineSeconds")
    if ndl is not None:
        if not _is_int(ndl) or not 0 <= ndl <= MAX_INT32:
            errs.append(FieldError.invalid("spec.activeDeadlineSeconds", ndl, _range_error(0, MAX_INT32)))
            return errs
        if _is_int(odl) and odl < ndl:
            errs.append(
                FieldError.invalid("spec.activeDeadlineSeconds", ndl, "must be less than or equal to previous value")
            )
            return errs
    elif odl is not None:
        errs.append(
            FieldError.invalid(
                "spec.activeDeadlineSeconds", None, "must not update from a positive integer to nil value"
            )
        )

    ntol, otol = nspec.get("tolerations") or [], ospec.get("tolerations") or []
    if isinstance(ntol, list) and isinstance(otol, list):
        errs += _only_added_tolerations(ntol, otol, "spec.tolerations")

    if nspec == ospec or _semantic(nspec) == _semantic(ospec):  # the first: a metadata-only update, cheaply
        return errs

    munged = copy.deepcopy(nspec)
    for key in ("containers", "initContainers"):
        olist = ospec.get(key) or []
        for i, ctr in enumerate(munged.get(key) or []):
            if isinstance(ctr, dict) and i < len(olist) and isinstance(olist[i], dict):
                if "image" in olist[i]:
                    ctr["image"] = olist[i]["image"]
                else:
                    ctr.pop("image", None)
    for key in ("activeDeadlineSeconds", "tolerations"):
        if key in ospec:
            munged[key] = copy.deepcopy(ospec[key])
        else:
            munged.pop(key, None)
    ograce = ospec.get("terminationGracePeriodSeconds")
    if _is_int(ograce) and ograce < 0 and munged.get("terminationGracePeriodSeconds") == 1:
        munged["terminationGracePeriodSeconds"] = ograce
    old_norm, new_norm = _semantic(ospec), _semantic(munged)
    if old_norm != new_norm:
        lines: list[str] = []
        _diff(old_norm, new_norm, "spec", lines)
        errs.append(FieldError.forbidden("spec", POD_UPDATE_FORBIDDEN_MESSAGE + "\n" + "\n".join(lines)))
    return errs


def validate_pod_ephemeral_containers_update(new: dict, old: dict) -> list[FieldError]:
    """A write through ``pods/ephemeralcontainers`` (upstream ValidatePodEphemeralContainersUpdate).

    ``new`` differs from ``old`` only in ``spec.ephemeralContainers`` (the strategy keeps
    everything else): the whole pod must still be valid (names unique across all
    containers, an existing target, none of the fields ephemeral containers may not
    have), and the ephemeral containers already there stay exactly as they are, since
    the node agent has started or is starting them. A static pod's mirror takes none.
    """
    if not isinstance(new, dict) or not isinstance(old, dict):
        return [FieldError.type_invalid("", new, "must be an object")]
    if names.ANNOTATION_CONFIG_MIRROR in (dict_at(old, "metadata").get("annotations") or {}):
        # The field path upstream reports is its root path with an empty name.
        return [FieldError.forbidden("[]", EPHEMERAL_STATIC_POD_MESSAGE)]
    errs = _pod_body(new)
    errs += _pod_specific_annotation_updates(
        dict_at(new, "metadata").get("annotations"), dict_at(old, "metadata").get("annotations"), "metadata.annotations"
    )
    path = "spec.ephemeralContainers"
    added = dict_at(new, "spec").get("ephemeralContainers") or []
    by_name = {c.get("name"): c for c in added if isinstance(c, dict)} if isinstance(added, list) else {}
    for before in dict_at(old, "spec").get("ephemeralContainers") or []:
        if not isinstance(before, dict):
            continue
        name = before.get("name")
        after = by_name.get(name)
        if after is None:
            errs.append(FieldError.forbidden(path, EPHEMERAL_REMOVED_MESSAGE.format(name=name)))
            continue
        old_norm, new_norm = _semantic(before), _semantic(after)
        if old_norm != new_norm:
            lines: list[str] = []
            _diff(old_norm, new_norm, f"{path}[{name}]", lines)
            errs.append(
                FieldError.forbidden(f"{path}[{name}]", EPHEMERAL_CHANGED_MESSAGE.format(name=name) + "\n".join(lines))
            )
    return errs
