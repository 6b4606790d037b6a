"""A container's environment, ``$(VAR)`` expansion and the downward API values.

Upstream resolves a container's environment in the agent, not in the runtime:
``envFrom`` sources first, then ``env`` in declared order, each value expanded
against the variables resolved so far, or taken from its ``valueFrom`` source
(pod fields, the container's resources, ConfigMap and Secret keys). Command,
args and ``subPathExpr`` are then expanded against the result. The downward
API volume reads the same pod fields and resources, so those helpers live here
too.

ConfigMaps and Secrets come from an :data:`ObjectGetter`. It is a *synchronous*
callable ``(kind, namespace, name) -> dict | None`` (kind ``"ConfigMap"`` or
``"Secret"``; ``None`` means "not found"): the config builders are plain
functions called by the pod worker, and upstream reads these objects from a
watch-fed cache too, so the getter must answer from memory and not block. A
getter that raises makes the container config fail with the exception's text.
Without a getter (standalone mode) every reference is "not found", which an
``optional`` reference tolerates.

Service environment variables (:func:`service_environment`) are rendered here
from the Services the caller hands in (the agent's Service cache in cluster mode):
a container's own ``env`` and ``envFrom`` variables win over them, and ``$(VAR)``
in ``env`` values, command and args may refer to them.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import os
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import psutil

from apiserver_min.api import names
from apiserver_min.api.quantity import Quantity, QuantityError, parse_quantity
from apiserver_min.api.validation import go_quote, is_qualified_name

from .context import NodeContext
from .errors import REASON_CREATE_CONTAINER_CONFIG, PodConfigError

__all__ = [
    "ObjectGetter",
    "expand",
    "expand_strict",
    "make_environment",
    "pod_field_value",
    "metadata_field_value",
    "container_resource_value",
    "defaulted_limits",
    "node_memory_capacity",
    "node_cpu_millis",
    "node_ephemeral_storage",
    "get_object",
    "secret_data",
    "configmap_data",
    "ordered_pod_ips",
    "service_environment",
    "MASTER_SERVICE_NAMESPACE",
    "service_env_vars",
]

ObjectGetter = Callable[[str, str, str], "dict | None"]

# The default namespace's Service whose variables every pod gets, even with
# enableServiceLinks false (upstream's "kubernetes" master service).
MASTER_SERVICE_NAMESPACE = names.NS_DEFAULT
MASTER_SERVICES = frozenset({names.DEFAULT_SERVICE_NAME})

_OPERATOR = "$"
_OPENER = "("
_CLOSER = ")"

# Upstream's IsEnvVarName (1.27): what envFrom keys must look like after the prefix.
_ENV_VAR_NAME_RE = re.compile(r"[-._a-zA-Z][-._a-zA-Z0-9]*")


# --- $(VAR) expansion -----------------------------------------------------------------


def _expand_with(text: str, mapping: Callable[[str], str]) -> str:
    """Upstream's expansion scan: ``$(NAME)`` is replaced by ``mapping(NAME)``,
    ``$$`` is a literal ``$``, and anything else (``$x``, an unclosed ``$(``, a
    trailing ``$``) stays as written."""
    out: list[str] = []
    checkpoint = 0
    cursor = 0
    n = len(text)
    while cursor < n:
        if text[cursor] == _OPERATOR and cursor + 1 < n:
            out.append(text[checkpoint:cursor])
            nxt = text[cursor + 1]
            if nxt == _OPERATOR:
                out.append(_OPERATOR)
                advance = 1
            elif nxt == _OPENER:
                close = text.find(_CLOSER, cursor + 2)
                if close == -1:
                    out.append(_OPERATOR + _OPENER)
                    advance = 1
                else:
                    out.append(mapping(text[cursor + 2 : close]))
                    advance = close - cursor
            else:
                out.append(_OPERATOR + nxt)
                advance = 1
            cursor += advance
            checkpoint = cursor + 1
        cursor += 1
    out.append(text[checkpoint:])
    return "".join(out)


def expand(text: str, env: Mapping[str, str]) -> str:
    """Expand ``$(VAR)`` references in ``text`` against ``env``; an undefined
    reference is left verbatim (``$(VAR)``), as upstream does."""
    return _expand_with(text, lambda name: env[name] if name in env else _OPERATOR + _OPENER + name + _CLOSER)


def expand_strict(text: str, env: Mapping[str, str]) -> tuple[str, list[str]]:
    """Expansion for ``subPathExpr``: an undefined or empty variable expands to
    nothing and is reported, so the caller can refuse the mount (upstream's
    "missing value for ..." error). Returns (expanded, sorted missing names)."""
    missing: set[str] = set()

    def mapping(name: str) -> str:
        value = env.get(name, "")
        if not value:
            missing.add(name)
        return value

    return _expand_with(text, mapping), sorted(missing)


# --- node facts with fallbacks --------------------------------------------------------


def node_memory_capacity(ctx: NodeContext) -> int:
    """Bytes of memory pods may use: the node's allocatable when known, else the machine's."""
    return ctx.node_allocatable_memory or int(psutil.virtual_memory().total)


def node_cpu_millis(ctx: NodeContext) -> int:
    return ctx.node_allocatable_cpu_millis or (os.cpu_count() or 1) * 1000


def node_ephemeral_storage(ctx: NodeContext) -> int:
    """The capacity of the file system holding the agent's root dir (upstream's
    allocatable ephemeral storage before reservations); 0 when it cannot be read."""
    path = ctx.root_dir
    while path and not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    try:
        st = os.statvfs(path or "/")
    except OSError:
        return 0
    return st.f_blocks * st.f_frsize


# --- pod fields -------------------------------------------------------------------------


def _format_map(values: Mapping[str, str]) -> str:
    """Upstream's FormatMap: ``key="value"`` lines, keys sorted, values Go-quoted."""
    return "\n".join(f"{key}={go_quote(str(values[key]))}" for key in sorted(values))


def _split_subscript(path: str) -> tuple[str, str] | None:
    if not path.endswith("']"):
        return None
    head, sep, sub = path[:-2].partition("['")
    if not sep or not head:
        return None
    return head, sub


def metadata_field_value(pod: dict, field_path: str) -> str:
    """The metadata fields both env vars and downward API files may name.

    Raises ValueError with upstream's wording for anything else."""
    meta = pod.get("metadata") or {}
    split = _split_subscript(field_path)
    if split is not None:
        head, key = split
        if head == "metadata.annotations":
            errs = is_qualified_name(key.lower())
            if errs:
                raise ValueError(f"invalid key subscript in {field_path}: {';'.join(errs)}")
            return str((meta.get("annotations") or {}).get(key, ""))
        if head == "metadata.labels":
            errs = is_qualified_name(key)
            if errs:
                raise ValueError(f"invalid key subscript in {field_path}: {';'.join(errs)}")
            return str((meta.get("labels") or {}).get(key, ""))
        raise ValueError(f"fieldPath {go_quote(field_path)} does not support subscript")
    if field_path == "metadata.annotations":
        return _format_map(meta.get("annotations") or {})
    if field_path == "metadata.labels":
        return _format_map(meta.get("labels") or {})
    if field_path == "metadata.name":
        return meta.get("name") or ""
    if field_path == "metadata.namespace":
        return meta.get("namespace") or "default"
    if field_path == "metadata.uid":
        return meta.get("uid") or ""
    raise ValueError(f"unsupported fieldPath: {field_path}")


def ordered_pod_ips(pod_ip: str, pod_ips: Sequence[str], host_ip: str) -> list[str]:
    """The pod's IPs with the node's family first (upstream sorts so that a
    dual-stack pod's ``status.podIP`` matches the node's preferred family)."""
    ips = [ip for ip in pod_ips if ip] or ([pod_ip] if pod_ip else [])
    try:
        want_v6 = bool(host_ip) and ipaddress.ip_address(host_ip).version == 6
    except ValueError:
        want_v6 = False

    def is_v6(ip: str) -> bool:
        try:
            return ipaddress.ip_address(ip).version == 6
        except ValueError:
            return False

    first = [ip for ip in ips if is_v6(ip) == want_v6]
    return first + [ip for ip in ips if ip not in first]


def pod_field_value(
    pod: dict, field_ref: Mapping[str, Any], ctx: NodeContext, *, pod_ip: str = "", pod_ips: Sequence[str] = ()
) -> str:
    """The value of an env var's ``valueFrom.fieldRef``. ValueError when unsupported."""
    version = field_ref.get("apiVersion") or "v1"
    if version != "v1":
        raise ValueError(f"unsupported pod version: {version}")
    path = field_ref.get("fieldPath") or ""
    ips = ordered_pod_ips(pod_ip, pod_ips, ctx.host_ip)
    spec = pod.get("spec") or {}
    if path == "spec.nodeName":
        return spec.get("nodeName") or ""
    if path == "spec.serviceAccountName":
        return spec.get("serviceAccountName") or ""
    if path == "status.hostIP":
        return ctx.host_ip
    if path == "status.podIP":
        return ips[0] if ips else ""
    if path == "status.podIPs":
        return ",".join(ips)
    return metadata_field_value(pod, path)


# --- container resources ----------------------------------------------------------------


def _quantity(value: Any, where: str) -> Quantity:
    try:
        return parse_quantity(value)
    except QuantityError as exc:
        raise ValueError(f"{where}: {exc}") from None


def defaulted_limits(container: dict, ctx: NodeContext) -> dict[str, Quantity]:
    """The container's cpu, memory and ephemeral-storage limits, an unset (or zero)
    one replaced by the node's allocatable amount, as upstream does for the
    downward API."""
    limits = ((container.get("resources") or {}).get("limits")) or {}
    result: dict[str, Quantity] = {}
    for name, raw in limits.items():
        result[name] = _quantity(raw, f"resources.limits.{name}")
    if not result.get("cpu"):
        result["cpu"] = parse_quantity(f"{node_cpu_millis(ctx)}m")
    if not result.get("memory"):
        result["memory"] = Quantity(node_memory_capacity(ctx))
    if not result.get("ephemeral-storage"):
        result["ephemeral-storage"] = Quantity(node_ephemeral_storage(ctx))
    return result


def _ceil_div(numerator: int, denominator: int) -> int:
    return -((-numerator) // denominator)


def container_resource_value(resource_ref: Mapping[str, Any], container: dict, ctx: NodeContext) -> str:
    """The value of a ``resourceFieldRef`` for ``container``: the amount divided by
    the divisor (default 1), rounded up; CPU is compared in millicores."""
    resource = resource_ref.get("resource") or ""
    divisor_raw = resource_ref.get("divisor")
    divisor = _quantity(divisor_raw, "divisor") if divisor_raw not in (None, "", 0) else None
    if divisor is None or divisor.is_zero():
        divisor = Quantity(1)
    kind, _, name = resource.partition(".")
    if kind not in ("limits", "requests") or not (
        name in ("cpu", "memory", "ephemeral-storage") or name.startswith("hugepages-")
    ):
        raise ValueError(f"unsupported container resource : {resource}")
    if kind == "limits":
        amounts = defaulted_limits(container, ctx)
    else:
        raw = ((container.get("resources") or {}).get("requests")) or {}
        amounts = {key: _quantity(value, f"resources.requests.{key}") for key, value in raw.items()}
    amount = amounts.get(name, Quantity(0))
    if name == "cpu":
        div = divisor.milli_value()
        if div <= 0:
            raise ValueError(f"invalid divisor {divisor} for {resource}")
        return str(_ceil_div(amount.milli_value(), div))
    div = divisor.value()
    if div <= 0:
        raise ValueError(f"invalid divisor {divisor} for {resource}")
    return str(_ceil_div(amount.value(), div))


# --- ConfigMaps and Secrets ---------------------------------------------------------------


def get_object(objects: ObjectGetter | None, kind: str, namespace: str, name: str) -> dict | None:
    """One lookup through the getter; None when absent or when there is no getter.
    A getter's own failure becomes a PodConfigError with its text."""
    if objects is None:
        return None
    try:
        return objects(kind, namespace, name)
    except PodConfigError:
        raise
    except Exception as exc:  # noqa: BLE001 - the getter is the caller's; report, don't crash
        raise PodConfigError(
            REASON_CREATE_CONTAINER_CONFIG, f"couldn't get {kind.lower()} {namespace}/{name}: {exc}"
        ) from exc


def configmap_data(obj: Mapping[str, Any]) -> dict[str, bytes]:
    """A ConfigMap's ``data`` and ``binaryData`` (base64 in JSON) as bytes per key."""
    result: dict[str, bytes] = {}
    for key, value in (obj.get("data") or {}).items():
        result[key] = str(value).encode()
    for key, value in (obj.get("binaryData") or {}).items():
        result[key] = _b64(value, f"configmap binaryData[{key}]")
    return result


def secret_data(obj: Mapping[str, Any]) -> dict[str, bytes]:
    """A Secret's ``data`` (base64 in JSON) plus any ``stringData`` as bytes per key."""
    result: dict[str, bytes] = {}
    for key, value in (obj.get("data") or {}).items():
        result[key] = value if isinstance(value, bytes) else _b64(value, f"secret data[{key}]")
    for key, value in (obj.get("stringData") or {}).items():
        result[key] = str(value).encode()
    return result


def _b64(value: Any, where: str) -> bytes:
    if isinstance(value, bytes):
        return value
    try:
        return base64.b64decode(str(value), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise PodConfigError(REASON_CREATE_CONTAINER_CONFIG, f"{where} is not valid base64: {exc}") from None


def _config_error(message: str) -> PodConfigError:
    return PodConfigError(REASON_CREATE_CONTAINER_CONFIG, message)


class _Sources:
    """ConfigMaps and Secrets fetched once per environment build (as upstream caches them)."""

    def __init__(self, objects: ObjectGetter | None, namespace: str) -> None:
        self.objects = objects
        self.namespace = namespace
        self.cache: dict[tuple[str, str], dict[str, bytes] | None] = {}

    def get(self, kind: str, name: str) -> dict[str, bytes] | None:
        key = (kind, name)
        if key not in self.cache:
            obj = get_object(self.objects, kind, self.namespace, name)
            if obj is None:
                self.cache[key] = None
            elif kind == "ConfigMap":
                # Environment variables come from `data` only; binaryData is for volumes.
                self.cache[key] = configmap_data({"data": obj.get("data")})
            else:
                self.cache[key] = secret_data(obj)
        return self.cache[key]


def _not_found(kind: str, name: str) -> PodConfigError:
    # Upstream's cache answers NotFound for the singular resource: `configmap "x" not found`.
    return _config_error(f"{kind.lower()} {go_quote(name)} not found")


def make_environment(
    pod: dict,
    container: dict,
    ctx: NodeContext,
    *,
    pod_ip: str = "",
    pod_ips: Sequence[str] = (),
    objects: ObjectGetter | None = None,
    service_env: Mapping[str, str] | None = None,
) -> list[tuple[str, str]]:
    """The container's environment as ordered (name, value) pairs.

    ``envFrom`` entries come first (keys of each source in sorted order, a later
    source overriding an earlier one), then ``env`` in declared order; a name
    already present keeps its position and takes the new value. Raises
    PodConfigError(CreateContainerConfigError) for a missing non-optional
    source or key and for an unusable fieldRef or resourceFieldRef.

    ``service_env`` (from :func:`service_environment`) comes last, in sorted order,
    each variable only where the container did not set it; ``$(VAR)`` in ``env``
    values sees it after the container's own variables (as upstream).
    """
    namespace = (pod.get("metadata") or {}).get("namespace") or "default"
    services = service_env or {}
    sources = _Sources(objects, namespace)
    env: dict[str, str] = {}

    for env_from in container.get("envFrom") or []:
        prefix = env_from.get("prefix") or ""
        for kind, field in (("ConfigMap", "configMapRef"), ("Secret", "secretRef")):
            ref = env_from.get(field)
            if ref is None:
                continue
            name = ref.get("name") or ""
            data = sources.get(kind, name)
            if data is None:
                if ref.get("optional"):
                    continue
                raise _not_found(kind, name)
            for key in sorted(data):
                full = prefix + key
                if not _ENV_VAR_NAME_RE.fullmatch(full):
                    continue  # upstream skips invalid names with a warning event
                env[full] = data[key].decode(errors="replace")

    for var in container.get("env") or []:
        name = var.get("name") or ""
        value = var.get("value") or ""
        source = var.get("valueFrom")
        if value:
            value = expand(value, _Chain(env, services) if services else env)
        elif source:
            try:
                resolved = _value_from(pod, container, ctx, source, sources, pod_ip=pod_ip, pod_ips=pod_ips)
            except ValueError as exc:
                raise _config_error(f"env {name}: {exc}") from None
            if resolved is None:
                continue  # an optional reference that is absent: no variable at all
            value = resolved
        env[name] = value
    out = list(env.items())
    out += [(k, services[k]) for k in sorted(services) if k not in env]
    return out


class _Chain(Mapping[str, str]):
    """The container's variables, then the service variables: what ``$(VAR)`` sees."""

    def __init__(self, first: Mapping[str, str], second: Mapping[str, str]) -> None:
        self.first, self.second = first, second

    def __getitem__(self, key: str) -> str:
        if key in self.first:
            return self.first[key]
        return self.second[key]

    def __iter__(self):
        yield from self.first
        yield from (k for k in self.second if k not in self.first)

    def __len__(self) -> int:
        return len(set(self.first) | set(self.second))


# --- service links ----------------------------------------------------------------------


def _env_name(name: str) -> str:
    return name.replace("-", "_").upper()


def _service_ip_set(svc: Mapping[str, Any]) -> bool:
    ip = (svc.get("spec") or {}).get("clusterIP") or ""
    return ip not in ("", "None")


def service_env_vars(services: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """The variables of each Service with a cluster IP (upstream's FromServices):
    ``<NAME>_SERVICE_HOST``, ``<NAME>_SERVICE_PORT`` (the first port),
    ``<NAME>_SERVICE_PORT_<PORTNAME>`` per named port, and the Docker-link style
    ``<NAME>_PORT`` (the first port), ``<NAME>_PORT_<port>_<PROTO>`` with its
    ``_PROTO``, ``_PORT`` and ``_ADDR``. Names upper-cased, dashes as underscores."""
    out: list[tuple[str, str]] = []
    for svc in services:
        spec = svc.get("spec") or {}
        ports = [p for p in spec.get("ports") or [] if isinstance(p, dict)]
        if not _service_ip_set(svc) or not ports:
            continue
        prefix = _env_name(str((svc.get("metadata") or {}).get("name") or ""))
        ip = str(spec.get("clusterIP"))
        out.append((f"{prefix}_SERVICE_HOST", ip))
        out.append((f"{prefix}_SERVICE_PORT", str(ports[0].get("port"))))
        for p in ports:
            if p.get("name"):
                out.append((f"{prefix}_SERVICE_PORT_{_env_name(str(p['name']))}", str(p.get("port"))))
        for i, p in enumerate(ports):
            proto = str(p.get("protocol") or "TCP")
            host_port = f"[{ip}]:{p.get('port')}" if ":" in ip else f"{ip}:{p.get('port')}"
            url = f"{proto.lower()}://{host_port}"
            if i == 0:
                out.append((f"{prefix}_PORT", url))
            port_prefix = f"{prefix}_PORT_{p.get('port')}_{proto.upper()}"
            out += [
                (port_prefix, url),
                (f"{port_prefix}_PROTO", proto.lower()),
                (f"{port_prefix}_PORT", str(p.get("port"))),
                (f"{port_prefix}_ADDR", ip),
            ]
    return out


def service_environment(
    services: Sequence[Mapping[str, Any]],
    namespace: str,
    enable_service_links: bool,
    master_namespace: str = MASTER_SERVICE_NAMESPACE,
) -> dict[str, str]:
    """The service variables of a pod in ``namespace`` (upstream getServiceEnvVarMap): the
    Services with a cluster IP of that namespace when ``enable_service_links``, and
    always the ``orch`` Service of ``master_namespace`` (``--master-service-namespace``)."""
    chosen: dict[str, Mapping[str, Any]] = {}
    for svc in services:
        md = svc.get("metadata") or {}
        name, ns = md.get("name") or "", md.get("namespace") or ""
        if not _service_ip_set(svc):
            continue
        if ns == master_namespace and name in MASTER_SERVICES:
            chosen.setdefault(name, svc)
        elif ns == namespace and enable_service_links:
            chosen[name] = svc
    return dict(service_env_vars([chosen[n] for n in sorted(chosen)]))


def _value_from(
    pod: dict,
    container: dict,
    ctx: NodeContext,
    source: Mapping[str, Any],
    sources: _Sources,
    *,
    pod_ip: str,
    pod_ips: Sequence[str],
) -> str | None:
    if source.get("fieldRef") is not None:
        return pod_field_value(pod, source["fieldRef"], ctx, pod_ip=pod_ip, pod_ips=pod_ips)
    if source.get("resourceFieldRef") is not None:
        return container_resource_value(source["resourceFieldRef"], container, ctx)
    for kind, field, what in (("ConfigMap", "configMapKeyRef", "ConfigMap"), ("Secret", "secretKeyRef", "Secret")):
        ref = source.get(field)
        if ref is None:
            continue
        name = ref.get("name") or ""
        key = ref.get("key") or ""
        optional = bool(ref.get("optional"))
        data = sources.get(kind, name)
        if data is None:
            if optional:
                return None
            raise _not_found(kind, name)
        if key not in data:
            if optional:
                return None
            raise _config_error(f"couldn't find key {key} in {what} {sources.namespace}/{name}")
        return data[key].decode(errors="replace")
    return ""
