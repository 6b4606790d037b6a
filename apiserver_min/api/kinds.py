"""The kind registry: each served kind declared once.

A declaration names where a kind lives (group, version, resource), how it is
scoped, which sub-resources and verbs it has, which fields a field selector may
use, and how a Table prints it. Discovery, routing, storage keys, field
selectors, tables and (later) schemas, OpenAPI and protobuf all read these
declarations; nothing else lists kinds.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
from typing import Any, Callable, Iterable

from . import names
from .quantity import QuantityError, parse_quantity

ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
READ_VERBS = ("get", "list", "watch")
# The proxy sub-resources: one verb per HTTP method (GET and HEAD get, POST create, ...).
PROXY_VERBS = ("create", "delete", "get", "patch", "update")


@dataclasses.dataclass(frozen=True)
class Column:
    """One Table column: upstream's columnDefinition plus how to compute the cell."""

    name: str
    type: str  # string | integer | number | boolean | date
    cell: Callable[[dict], Any]
    format: str = ""
    description: str = ""
    priority: int = 0  # 0 = always shown, 1 = only with -o wide

    def definition(self) -> dict:
        return {
            "name": self.name,
            "type": self.type,
            "format": self.format,
            "description": self.description or self.name,
            "priority": self.priority,
        }


@dataclasses.dataclass(frozen=True)
class Subresource:
    name: str
    kind: str  # the kind the sub-resource reads and writes (e.g. Pod for pods/status)
    verbs: tuple[str, ...]
    group: str = ""  # group of ``kind`` when it differs (Binding: core; Eviction: policy)
    version: str = ""
    # The REST implementation that serves it (``registry.rest.RestTable``): "store" is the
    # object itself through the generic store (status, approval); others name their own.
    rest: str = "store"


@dataclasses.dataclass(frozen=True)
class KindInfo:
    group: str
    version: str
    resource: str
    kind: str
    namespaced: bool
    singular: str = ""
    short_names: tuple[str, ...] = ()
    verbs: tuple[str, ...] = ALL_VERBS
    # Served sub-resources only: discovery lists each one, so a declared one must answer.
    subresources: tuple[Subresource, ...] = ()
    categories: tuple[str, ...] = ()
    # Extra field-selector fields beyond metadata.name / metadata.namespace.
    field_getters: dict[str, Callable[[dict], str | bool]] = dataclasses.field(default_factory=dict)
    columns: tuple[Column, ...] = ()
    # PUT of a missing object creates it (upstream: AllowCreateOnUpdate), authorized as create.
    # Upstream (1.27) allows it for services, endpoints, events, limit ranges, leases, RBAC
    # roles and bindings, and runtime classes; every other kind answers 404.
    create_on_update: bool = False
    deprecated: bool = False
    removed_release: str = ""
    # Kinds defined at run time by a CustomResourceDefinition: served in JSON and YAML
    # only (no protobuf), their list kind named by the definition.
    custom: bool = False
    custom_list_kind: str = ""
    custom_storage_version: str = ""  # the version its objects are stored in
    # A custom kind's openAPIV3Schema as its definition gives it (OpenAPI, kubectl explain).
    custom_schema: Any = dataclasses.field(default=None, compare=False, repr=False)
    # How objects change version (apiextensions.conversion.WebhookConverter), None: only apiVersion changes.
    custom_converter: Any = dataclasses.field(default=None, compare=False, repr=False)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_version(self) -> str:
        return self.api_version

    @property
    def list_kind(self) -> str:
        return self.custom_list_kind or self.kind + "List"

    @property
    def singular_name(self) -> str:
        return self.singular or self.kind.lower()

    @property
    def qualified_resource(self) -> str:
        return f"{self.resource}.{self.group}" if self.group else self.resource

    def subresource(self, name: str) -> Subresource | None:
        for s in self.subresources:
            if s.name == name:
                return s
        return None

    def selectable_fields(self, obj: dict) -> dict[str, str]:
        md = obj.get("metadata") or {}
        fields = {"metadata.name": md.get("name", "")}
        if self.namespaced:
            fields["metadata.namespace"] = md.get("namespace", "")
        for path, getter in self.field_getters.items():
            try:
                value = getter(obj)
            except (AttributeError, KeyError, TypeError, IndexError):
                value = ""
            fields[path] = _field_string(value)
        return fields

    @property
    def field_names(self) -> frozenset[str]:
        base = {"metadata.name"} | ({"metadata.namespace"} if self.namespaced else set())
        return frozenset(base | set(self.field_getters))

    def table_columns(self) -> tuple[Column, ...]:
        return self.columns or DEFAULT_COLUMNS


def _field_string(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


# --- small accessors for field getters and table cells -----------------------------------


def dig(obj: Any, *path: str | int, default: Any = None) -> Any:
    cur = obj
    for p in path:
        if isinstance(p, int):
            if not isinstance(cur, list) or p >= len(cur):
                return default
            cur = cur[p]
        else:
            if not isinstance(cur, dict) or p not in cur:
                return default
            cur = cur[p]
    return cur


def _param_kind(policy: dict) -> str:
    kind = (policy.get("spec") or {}).get("paramKind")
    if not isinstance(kind, dict):
        return "<unset>"
    return f"{kind.get('apiVersion') or ''}/{kind.get('kind') or ''}"


def _param_ref(binding: dict) -> str:
    ref = (binding.get("spec") or {}).get("paramRef")
    if not isinstance(ref, dict):
        return "<unset>"
    name = ref.get("name") or ("*" if ref.get("selector") is not None else "")
    return f"{ref['namespace']}/{name}" if ref.get("namespace") else name


def _getter(*path: str) -> Callable[[dict], Any]:
    return lambda obj: dig(obj, *path, default="")


def human_duration(seconds: float) -> str:
    """Short human-readable age, the way upstream tables print AGE."""
    s = int(seconds)  # truncated toward zero, as upstream's int(d.Seconds()): -1.5s is "0s"
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    m = s // 60
    if m < 10:
        rest = s % 60
        return f"{m}m{rest}s" if rest else f"{m}m"
    h = s // 3600
    if h < 3:
        return f"{m}m"
    if h < 8:
        rest = m % 60
        return f"{h}h{rest}m" if rest else f"{h}h"
    if h < 48:
        return f"{h}h"
    d = h // 24
    if h < 24 * 8:
        rest = h % 24
        return f"{d}d{rest}h" if rest else f"{d}d"
    if h < 24 * 365 * 2:
        return f"{d}d"
    y = d // 365
    if y < 8:
        rest = d % 365
        return f"{y}y{rest}d" if rest else f"{y}y"
    return f"{y}y"


def _quota_cell(obj: dict, limits: bool) -> str:
    """``name: used/hard`` of a quota's status, sorted by name: the limits.* resources or the others."""
    status = obj.get("status") if isinstance(obj.get("status"), dict) else {}
    hard = (status or {}).get("hard") or {}
    used = (status or {}).get("used") or {}
    if not isinstance(hard, dict) or not isinstance(used, dict):
        return ""
    cells = [
        f"{name}: {used.get(name, '0')}/{hard[name]}" for name in sorted(hard) if name.startswith("limits.") == limits
    ]
    return ", ".join(cells)


def age(timestamp: str | None, now: _dt.datetime | None = None) -> str:
    if not timestamp:
        return "<unknown>"
    try:
        t = _dt.datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except ValueError:
        return "<invalid>"
    now = now or _dt.datetime.now(_dt.timezone.utc)
    return human_duration((now - t).total_seconds())


def _age_cell(obj: dict) -> str:
    return age(dig(obj, "metadata", "creationTimestamp"))


def _name_cell(obj: dict) -> str:
    return dig(obj, "metadata", "name", default="")


NAME = Column("Name", "string", _name_cell, format="name", description="Name must be unique within a namespace.")
AGE = Column(
    "Age",
    "string",
    _age_cell,
    description="CreationTimestamp is a timestamp representing the server time when this object was created.",
)
DEFAULT_COLUMNS = (
    NAME,
    Column(
        "Created At",
        "date",
        lambda o: dig(o, "metadata", "creationTimestamp", default=""),
        description="CreationTimestamp is a timestamp representing the server time when this object was created.",
    ),
)


def _join(values: Iterable[Any], empty: str = "<none>") -> str:
    items = [str(v) for v in values if v not in (None, "")]
    return ",".join(items) if items else empty


# --- per-kind cells ------------------------------------------------------------------


def _ingress_hosts_cell(o: dict) -> str:
    """The rules' hosts, the first three and how many rules more (``*``: none)."""
    rules = [r for r in dig(o, "spec", "rules", default=[]) or [] if isinstance(r, dict)]
    shown: list[str] = []
    more = False
    for r in rules:
        if len(shown) == 3:
            more = True
            break
        if r.get("host"):
            shown.append(str(r["host"]))
    if not shown:
        return "*"
    return ",".join(shown) + (f" + {len(rules) - 3} more..." if more else "")


def _ingress_class_parameters_cell(o: dict) -> str:
    """``Kind[.apiGroup]/name`` of the class's parameters, ``<none>`` without."""
    params = dig(o, "spec", "parameters")
    if not isinstance(params, dict):
        return "<none>"
    kind = str(params.get("kind") or "")
    if params.get("apiGroup") is not None:
        kind += f".{params['apiGroup']}"
    return f"{kind}/{params.get('name') or ''}"


def pod_ready(obj: dict) -> str:
    statuses = dig(obj, "status", "containerStatuses", default=[]) or []
    total = len(dig(obj, "spec", "containers", default=[]) or [])
    ready = sum(1 for s in statuses if s.get("ready"))
    return f"{ready}/{total}"


def pod_restarts(obj: dict) -> int:
    return sum(int(s.get("restartCount", 0) or 0) for s in dig(obj, "status", "containerStatuses", default=[]) or [])


def pod_status_reason(obj: dict) -> str:
    """What the STATUS column shows: the most telling reason, as upstream prints it."""
    status = obj.get("status") or {}
    reason = status.get("reason") or status.get("phase") or "Pending"
    init_statuses = status.get("initContainerStatuses") or []
    init_total = len(dig(obj, "spec", "initContainers", default=[]) or [])
    initializing = False
    for i, cs in enumerate(init_statuses):
        state = cs.get("state") or {}
        term = state.get("terminated")
        if term and term.get("exitCode", 0) == 0:
            continue
        if term:
            r = term.get("reason") or (
                f"Signal:{term['signal']}" if term.get("signal") else f"ExitCode:{term.get('exitCode', 0)}"
            )
            reason = "Init:" + r
        elif (state.get("waiting") or {}).get("reason") not in (None, "", "PodInitializing"):
            reason = "Init:" + state["waiting"]["reason"]
        else:
            reason = f"Init:{i}/{init_total}"
        initializing = True
        break
    if not initializing:
        has_running = False
        for cs in reversed(status.get("containerStatuses") or []):
            state = cs.get("state") or {}
            waiting, term = state.get("waiting"), state.get("terminated")
            if waiting and waiting.get("reason"):
                reason = waiting["reason"]
            elif term and term.get("reason"):
                reason = term["reason"]
            elif term:
                reason = f"Signal:{term['signal']}" if term.get("signal") else f"ExitCode:{term.get('exitCode', 0)}"
            elif state.get("running") and cs.get("ready"):
                has_running = True
        if reason == "Completed" and has_running:
            reason = "Running"
    if dig(obj, "metadata", "deletionTimestamp"):
        reason = "Unknown" if status.get("reason") == "NodeLost" else "Terminating"
    return reason


def node_status(obj: dict) -> str:
    conds = {c.get("type"): c.get("status") for c in dig(obj, "status", "conditions", default=[]) or []}
    ready = conds.get("Ready")
    parts = ["Ready" if ready == "True" else "NotReady" if ready == "False" else "Unknown"]
    if dig(obj, "spec", "unschedulable"):
        parts.append("SchedulingDisabled")
    return ",".join(parts)


def node_roles(obj: dict) -> str:
    labels = dig(obj, "metadata", "labels", default={}) or {}
    prefix = f"node-role.{names.DOMAIN}/"
    roles = sorted(k[len(prefix) :] for k in labels if k.startswith(prefix) and k[len(prefix) :])
    return ",".join(roles) if roles else "<none>"


def _node_address(kind: str) -> Callable[[dict], str]:
    def cell(obj: dict) -> str:
        for a in dig(obj, "status", "addresses", default=[]) or []:
            if a.get("type") == kind:
                return a.get("address", "")
        return "<none>"

    return cell


def _service_ports(obj: dict) -> str:
    out = []
    for p in dig(obj, "spec", "ports", default=[]) or []:
        s = f"{p.get('port')}"
        if p.get("nodePort"):
            s += f":{p['nodePort']}"
        out.append(f"{s}/{p.get('protocol', 'TCP')}")
    return ",".join(out) if out else "<none>"


def _service_external_ip(obj: dict) -> str:
    spec = obj.get("spec") or {}
    typ = spec.get("type", "ClusterIP")
    if typ == "ExternalName":
        return spec.get("externalName", "<none>")
    ips = list(spec.get("externalIPs") or [])
    if typ == "LoadBalancer":
        ingress = dig(obj, "status", "loadBalancer", "ingress", default=[]) or []
        ips += [i.get("ip") or i.get("hostname") for i in ingress]
        return ",".join(ips) if ips else "<pending>"
    return ",".join(ips) if ips else "<none>"


def _selector_text(sel: dict | None) -> str:
    if not sel:
        return "<none>"
    return ",".join(f"{k}={v}" for k, v in sorted(sel.items()))


def label_selector_text(sel: dict | None) -> str:
    if not sel:
        return "<none>"
    parts = [f"{k}={v}" for k, v in sorted((sel.get("matchLabels") or {}).items())]
    for e in sel.get("matchExpressions") or []:
        op, key, vals = e.get("operator"), e.get("key"), sorted(e.get("values") or [])
        if op == "In":
            parts.append(f"{key} in ({','.join(vals)})")
        elif op == "NotIn":
            parts.append(f"{key} notin ({','.join(vals)})")
        elif op == "Exists":
            parts.append(key)
        elif op == "DoesNotExist":
            parts.append("!" + key)
    return ",".join(parts) if parts else "<none>"


def _endpoints_cell(obj: dict) -> str:
    out = []
    for subset in obj.get("subsets") or []:
        ports = subset.get("ports") or [{}]
        for a in subset.get("addresses") or []:
            for p in ports:
                out.append(f"{a.get('ip')}:{p['port']}" if p.get("port") else a.get("ip"))
    if not out:
        return "<none>"
    if len(out) > 3:
        return ",".join(out[:3]) + f" + {len(out) - 3} more..."
    return ",".join(out)


def _data_count(obj: dict) -> int:
    return len(obj.get("data") or {}) + len(obj.get("binaryData") or {}) + len(obj.get("stringData") or {})


def _csr_condition(obj: dict) -> str:
    conds = [c.get("type") for c in dig(obj, "status", "conditions", default=[]) or []]
    out = [c for c in conds if c in ("Approved", "Denied")] + [c for c in conds if c == "Failed"]
    text = ",".join(out) if out else "Pending"
    if dig(obj, "status", "certificate"):
        text += ",Issued"
    return text


def _csr_duration(obj: dict) -> str:
    secs = dig(obj, "spec", "expirationSeconds")
    return human_duration(secs) if secs else "<none>"


def _containers_cell(path: tuple[str, ...], attr: str) -> Callable[[dict], str]:
    return lambda obj: _join((c.get(attr) for c in dig(obj, *path, default=[]) or []))


def _replicas(obj: dict) -> Any:
    return dig(obj, "spec", "replicas", default=1)


def _ready_of(obj: dict) -> str:
    return f"{dig(obj, 'status', 'readyReplicas', default=0) or 0}/{_replicas(obj)}"


def _quantity_text(value: Any) -> str:
    """A quantity as upstream prints one (its canonical form)."""
    try:
        return parse_quantity(value).canonical()
    except (QuantityError, TypeError, ValueError):
        return str(value)


def _as_dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def _hpa_metric_text(spec: dict, status: dict | None) -> str:
    """One metric of ``kubectl get hpa``'s TARGETS: ``current/target``, current ``<unknown>``
    until the controller reported it."""
    typ = spec.get("type")
    key = {
        "External": "external",
        "Pods": "pods",
        "Object": "object",
        "Resource": "resource",
        "ContainerResource": "containerResource",
    }.get(typ or "")
    if key is None:
        return "<unknown type>"
    source = _as_dict(spec.get(key))
    target = _as_dict(source.get("target"))
    found = _as_dict(status.get(key)) if isinstance(status, dict) and isinstance(status.get(key), dict) else None
    current = _as_dict((found or {}).get("current"))
    if key in ("external", "object"):
        if target.get("averageValue") is not None:
            now = _quantity_text(current["averageValue"]) if current.get("averageValue") is not None else "<unknown>"
            return f"{now}/{_quantity_text(target['averageValue'])} (avg)"
        now = (
            _quantity_text(current["value"]) if found is not None and current.get("value") is not None else "<unknown>"
        )
        return f"{now}/{_quantity_text(target.get('value', '0'))}"
    if key == "pods":
        now = _quantity_text(current["averageValue"]) if current.get("averageValue") is not None else "<unknown>"
        return f"{now}/{_quantity_text(target.get('averageValue', '0'))}"
    if target.get("averageValue") is not None:
        now = _quantity_text(current["averageValue"]) if current.get("averageValue") is not None else "<unknown>"
        return f"{now}/{_quantity_text(target['averageValue'])}"
    now = f"{current['averageUtilization']}%" if current.get("averageUtilization") is not None else "<unknown>"
    goal = f"{target['averageUtilization']}%" if target.get("averageUtilization") is not None else "<auto>"
    return f"{now}/{goal}"


def hpa_targets(obj: dict) -> str:
    """The TARGETS cell: the first two metrics (each matched to the status entry at its
    index, as upstream's printer does), then how many more."""
    specs = dig(obj, "spec", "metrics", default=[]) or []
    if not specs:
        return "<none>"
    statuses = dig(obj, "status", "currentMetrics", default=[]) or []
    texts = [
        _hpa_metric_text(s if isinstance(s, dict) else {}, statuses[i] if i < len(statuses) else None)
        for i, s in enumerate(specs)
    ]
    if len(texts) > 2:
        return ", ".join(texts[:2]) + f" + {len(texts) - 2} more..."
    return ", ".join(texts)


def _hpa_min_pods(obj: dict) -> str:
    value = dig(obj, "spec", "minReplicas")
    return "<unset>" if value is None else str(value)


def _job_status(obj: dict) -> str:
    for c in dig(obj, "status", "conditions", default=[]) or []:
        if c.get("status") == "True" and c.get("type") in ("Complete", "Failed", "Suspended"):
            return c["type"]
    return "Running"


def _job_completions(obj: dict) -> str:
    succeeded = dig(obj, "status", "succeeded", default=0) or 0
    completions = dig(obj, "spec", "completions")
    parallelism = dig(obj, "spec", "parallelism", default=1)
    if completions is None:
        return f"{succeeded}/1 of {parallelism}" if parallelism and parallelism > 1 else f"{succeeded}/1"
    return f"{succeeded}/{completions}"


def _job_duration(obj: dict) -> str:
    start = dig(obj, "status", "startTime")
    if not start:
        return ""
    end = dig(obj, "status", "completionTime")
    t0 = _dt.datetime.fromisoformat(start.replace("Z", "+00:00"))
    t1 = _dt.datetime.fromisoformat(end.replace("Z", "+00:00")) if end else _dt.datetime.now(_dt.timezone.utc)
    return human_duration((t1 - t0).total_seconds())


def _event_last_seen(obj: dict) -> str:
    ts = (
        obj.get("lastTimestamp")
        or obj.get("eventTime")
        or dig(obj, "series", "lastObservedTime")
        or dig(obj, "metadata", "creationTimestamp")
    )
    return age(ts)


def _event_object(obj: dict) -> str:
    ref = obj.get("involvedObject") or obj.get("regarding") or {}
    return f"{(ref.get('kind') or '').lower()}/{ref.get('name', '')}"


def _event_count(obj: dict) -> int:
    return obj.get("count") or dig(obj, "series", "count") or obj.get("deprecatedCount") or 1


def _subjects(obj: dict, kind: str) -> str:
    subs = [s for s in obj.get("subjects") or [] if s.get("kind") == kind]
    if kind == "ServiceAccount":
        return _join(f"{s.get('namespace', '')}/{s.get('name', '')}" for s in subs)
    return _join(s.get("name") for s in subs)


def _role_ref(obj: dict) -> str:
    return f"{dig(obj, 'roleRef', 'kind', default='')}/{dig(obj, 'roleRef', 'name', default='')}"


def _pod_nominated(obj: dict) -> str:
    return dig(obj, "status", "nominatedNodeName") or "<none>"


def _pod_gates(obj: dict) -> str:
    gates = dig(obj, "spec", "readinessGates", default=[]) or []
    if not gates:
        return "<none>"
    conds = {c.get("type"): c.get("status") for c in dig(obj, "status", "conditions", default=[]) or []}
    ready = sum(1 for g in gates if conds.get(g.get("conditionType")) == "True")
    return f"{ready}/{len(gates)}"


def _or_none(fn: Callable[[dict], Any]) -> Callable[[dict], Any]:
    def cell(obj: dict) -> Any:
        v = fn(obj)
        return "<none>" if v in (None, "") else v

    return cell


def _or_none_text(value: Any) -> str:
    return "<none>" if value is None else str(value)


def _flow_schema_missing_pl(o: dict) -> str:
    """The status of the schema's Dangling condition, ``?`` before the server set one."""
    for c in dig(o, "status", "conditions", default=[]) or []:
        if isinstance(c, dict) and c.get("type") == "Dangling":
            return str(c.get("status") or "?")
    return "?"


def _storage_class_name(o: dict) -> str:
    """The name, marked `` (default)`` for the default class (as upstream's printer)."""
    ann = dig(o, "metadata", "annotations", default={}) or {}
    default = "true" in (
        ann.get(names.ANNOTATION_DEFAULT_STORAGE_CLASS),
        ann.get(names.ANNOTATION_DEFAULT_STORAGE_CLASS_BETA),
    )
    name = dig(o, "metadata", "name", default="") or ""
    return f"{name} (default)" if default else name


_STORAGE_CLASS_NAME = Column(
    "Name", "string", _storage_class_name, format="name", description="Name must be unique within a namespace."
)


def col(
    name: str, typ: str, fn: Callable[[dict], Any], priority: int = 0, description: str = "", fmt: str = ""
) -> Column:
    return Column(name, typ, fn, priority=priority, description=description, format=fmt)


# --- the declarations ---------------------------------------------------------------


def _sub(
    name: str,
    kind: str,
    verbs: tuple[str, ...] = ("get", "patch", "update"),
    group: str = "",
    version: str = "",
    rest: str = "store",
) -> Subresource:
    return Subresource(name, kind, verbs, group, version, rest)


def _status(kind: str) -> Subresource:
    return _sub("status", kind)


def _scale() -> Subresource:
    return _sub("scale", "Scale", group="autoscaling", version="v1", rest="scale")


_CORE = names.CORE_GROUP

KINDS: tuple[KindInfo, ...] = (
    # core v1 --------------------------------------------------------------------------
    KindInfo(
        _CORE,
        "v1",
        "namespaces",
        "Namespace",
        False,
        short_names=("ns",),
        verbs=("create", "delete", "get", "list", "patch", "update", "watch"),
        subresources=(_status("Namespace"), _sub("finalize", "Namespace", ("update",), rest="namespaces/finalize")),
        field_getters={"status.phase": _getter("status", "phase")},
        columns=(
            NAME,
            col("Status", "string", _getter("status", "phase"), description="The status of the namespace"),
            AGE,
        ),
    ),
    KindInfo(
        _CORE,
        "v1",
        "pods",
        "Pod",
        True,
        short_names=("po",),
        categories=("all",),
        subresources=(
            _status("Pod"),
            _sub("binding", "Binding", ("create",), rest="pods/binding"),
            _sub("eviction", "Eviction", ("create",), group="policy", version="v1", rest="pods/eviction"),
            _sub("log", "Pod", ("get",), rest="pods/log"),
            _sub("exec", "PodExecOptions", ("create", "get"), rest="pods/stream"),
            _sub("attach", "PodAttachOptions", ("create", "get"), rest="pods/stream"),
            _sub("portforward", "PodPortForwardOptions", ("create", "get"), rest="pods/stream"),
            _sub("proxy", "PodProxyOptions", PROXY_VERBS, rest="proxy"),
            # The pod itself, of which a write changes spec.ephemeralContainers only.
            _sub(names.POD_SUBRESOURCE_EPHEMERAL_CONTAINERS, "Pod"),
        ),
        field_getters={
            "spec.nodeName": _getter("spec", "nodeName"),
            "spec.restartPolicy": _getter("spec", "restartPolicy"),
            "spec.schedulerName": _getter("spec", "schedulerName"),
            "spec.serviceAccountName": _getter("spec", "serviceAccountName"),
            "spec.hostNetwork": lambda o: bool(dig(o, "spec", "hostNetwork", default=False)),
            "status.phase": _getter("status", "phase"),
            "status.podIP": _getter("status", "podIP"),
            "status.nominatedNodeName": _getter("status", "nominatedNodeName"),
        },
        columns=(
            NAME,
            col(
                "Ready",
                "string",
                pod_ready,
                description="The aggregate readiness state of this pod for accepting traffic.",
            ),
            col(
                "Status", "string", pod_status_reason, description="The aggregate status of the containers in this pod."
            ),
            col(
                "Restarts",
                "string",
                lambda o: str(pod_restarts(o)),
                description="The number of times the containers in this pod have been restarted.",
            ),
            AGE,
            col("IP", "string", _or_none(_getter("status", "podIP")), 1, "IP address allocated to the pod."),
            col("Node", "string", _or_none(_getter("spec", "nodeName")), 1, "Name of the node the pod is assigned to."),
            col("Nominated Node", "string", _pod_nominated, 1, "Name of the node the pod was nominated to."),
            col("Readiness Gates", "string", _pod_gates, 1, "The pod's readiness gates."),
        ),
    ),
    KindInfo(
        _CORE,
        "v1",
        "nodes",
        "Node",
        False,
        short_names=("no",),
        subresources=(_status("Node"), _sub("proxy", "NodeProxyOptions", PROXY_VERBS, rest="proxy")),
        field_getters={"spec.unschedulable": lambda o: bool(dig(o, "spec", "unschedulable", default=False))},
        columns=(
            NAME,
            col("Status", "string", node_status, description="The status of the node"),
            col("Roles", "string", node_roles, description="The roles of the node"),
            AGE,
            col(
                "Version",
                "string",
                _getter("status", "nodeInfo", "kubeletVersion"),
                description="Agent version reported by the node.",
            ),
            col("Internal-IP", "string", _node_address("InternalIP"), 1),
            col("External-IP", "string", _node_address("ExternalIP"), 1),
            col("OS-Image", "string", _or_none(_getter("status", "nodeInfo", "osImage")), 1),
            col("Kernel-Version", "string", _or_none(_getter("status", "nodeInfo", "kernelVersion")), 1),
            col("Container-Runtime", "string", _or_none(_getter("status", "nodeInfo", "containerRuntimeVersion")), 1),
        ),
    ),
    KindInfo(
        _CORE,
        "v1",
        "services",
        "Service",
        True,
        short_names=("svc",),
        categories=("all",),
        create_on_update=True,
        subresources=(_status("Service"), _sub("proxy", "ServiceProxyOptions", PROXY_VERBS, rest="proxy")),
        field_getters={"spec.clusterIP": _getter("spec", "clusterIP"), "spec.type": _getter("spec", "type")},
        columns=(
            NAME,
            col("Type", "string", _getter("spec", "type")),
            col("Cluster-IP", "string", _or_none(_getter("spec", "clusterIP"))),
            col("External-IP", "string", _service_external_ip),
            col("Port(s)", "string", _service_ports),
            AGE,
            col("Selector", "string", lambda o: _selector_text(dig(o, "spec", "selector")), 1),
        ),
    ),
    KindInfo(
        _CORE,
        "v1",
        "endpoints",
        "Endpoints",
        True,
        short_names=("ep",),
        singular="endpoints",
        create_on_update=True,
        columns=(NAME, col("Endpoints", "string", _endpoints_cell), AGE),
    ),
    KindInfo(
        _CORE,
        "v1",
        "configmaps",
        "ConfigMap",
        True,
        short_names=("cm",),
        columns=(NAME, col("Data", "integer", _data_count), AGE),
    ),
    KindInfo(
        _CORE,
        "v1",
        "secrets",
        "Secret",
        True,
        field_getters={"type": _getter("type")},
        columns=(NAME, col("Type", "string", _getter("type")), col("Data", "integer", _data_count), AGE),
    ),
    KindInfo(
        _CORE,
        "v1",
        "serviceaccounts",
        "ServiceAccount",
        True,
        short_names=("sa",),
        subresources=(
            _sub(
                "token",
                "TokenRequest",
                ("create",),
                group=names.AUTHENTICATION_GROUP,
                version="v1",
                rest="serviceaccounts/token",
            ),
        ),
        columns=(NAME, col("Secrets", "integer", lambda o: len(o.get("secrets") or [])), AGE),
    ),
    KindInfo(
        _CORE,
        "v1",
        "events",
        "Event",
        True,
        short_names=("ev",),
        create_on_update=True,
        field_getters={
            "involvedObject.kind": _getter("involvedObject", "kind"),
            "involvedObject.namespace": _getter("involvedObject", "namespace"),
            "involvedObject.name": _getter("involvedObject", "name"),
            "involvedObject.uid": _getter("involvedObject", "uid"),
            "involvedObject.apiVersion": _getter("involvedObject", "apiVersion"),
            "involvedObject.resourceVersion": _getter("involvedObject", "resourceVersion"),
            "involvedObject.fieldPath": _getter("involvedObject", "fieldPath"),
            "reason": _getter("reason"),
            "reportingComponent": _getter("reportingComponent"),
            "source": _getter("source", "component"),
            "type": _getter("type"),
        },
        columns=(
            col("Last Seen", "string", _event_last_seen),
            col("Type", "string", _getter("type")),
            col("Reason", "string", _getter("reason")),
            col("Object", "string", _event_object),
            col("Message", "string", _getter("message")),
            col("Source", "string", _getter("source", "component"), 1),
            col("First Seen", "string", lambda o: age(o.get("firstTimestamp") or o.get("eventTime")), 1),
            col("Count", "integer", _event_count, 1),
            NAME,
        ),
    ),
    KindInfo(
        _CORE,
        "v1",
        "limitranges",
        "LimitRange",
        True,
        short_names=("limits",),
        create_on_update=True,
        columns=(NAME, col("Created At", "date", _getter("metadata", "creationTimestamp"))),
    ),
    KindInfo(
        _CORE,
        "v1",
        "resourcequotas",
        "ResourceQuota",
        True,
        short_names=("quota",),
        subresources=(_status("ResourceQuota"),),
        columns=(
            NAME,
            AGE,
            col(
                "Request",
                "string",
                lambda o: _quota_cell(o, False),
                description="Used/hard of the quota's resources other than limits.*.",
            ),
            col(
                "Limit",
                "string",
                lambda o: _quota_cell(o, True),
                description="Used/hard of the quota's limits.* resources.",
            ),
        ),
    ),
    KindInfo(
        _CORE,
        "v1",
        "persistentvolumes",
        "PersistentVolume",
        False,
        short_names=("pv",),
        subresources=(_status("PersistentVolume"),),
        columns=(
            NAME,
            col("Capacity", "string", _getter("spec", "capacity", "storage")),
            col("Access Modes", "string", lambda o: _join(dig(o, "spec", "accessModes", default=[]) or [], "")),
            col("Reclaim Policy", "string", _getter("spec", "persistentVolumeReclaimPolicy")),
            col("Status", "string", _getter("status", "phase")),
            col(
                "Claim",
                "string",
                lambda o: (
                    f"{dig(o, 'spec', 'claimRef', 'namespace')}/{dig(o, 'spec', 'claimRef', 'name')}"
                    if dig(o, "spec", "claimRef")
                    else ""
                ),
            ),
            col("StorageClass", "string", _getter("spec", "storageClassName")),
            AGE,
        ),
    ),
    KindInfo(
        _CORE,
        "v1",
        "persistentvolumeclaims",
        "PersistentVolumeClaim",
        True,
        short_names=("pvc",),
        subresources=(_status("PersistentVolumeClaim"),),
        columns=(
            NAME,
            col("Status", "string", _getter("status", "phase")),
            col("Volume", "string", _getter("spec", "volumeName")),
            col("Capacity", "string", _getter("status", "capacity", "storage")),
            col("StorageClass", "string", _getter("spec", "storageClassName")),
            AGE,
        ),
    ),
    KindInfo(
        _CORE,
        "v1",
        "podtemplates",
        "PodTemplate",
        True,
        columns=(
            col("Template", "string", _name_cell, fmt="name"),
            col("Containers", "string", _containers_cell(("template", "spec", "containers"), "name")),
            col("Images", "string", _containers_cell(("template", "spec", "containers"), "image")),
            col("Pod Labels", "string", lambda o: _selector_text(dig(o, "template", "metadata", "labels"))),
        ),
    ),
    KindInfo(
        _CORE,
        "v1",
        "replicationcontrollers",
        "ReplicationController",
        True,
        short_names=("rc",),
        categories=("all",),
        subresources=(_status("ReplicationController"), _scale()),
        field_getters={"status.replicas": _getter("status", "replicas")},
        columns=(
            NAME,
            col("Desired", "integer", _replicas),
            col("Current", "integer", lambda o: dig(o, "status", "replicas", default=0)),
            col("Ready", "integer", lambda o: dig(o, "status", "readyReplicas", default=0)),
            AGE,
        ),
    ),
    # apps/v1 ---------------------------------------------------------------------------
    KindInfo(
        "apps",
        "v1",
        "deployments",
        "Deployment",
        True,
        short_names=("deploy",),
        categories=("all",),
        subresources=(_status("Deployment"), _scale()),
        columns=(
            NAME,
            col("Ready", "string", _ready_of),
            col("Up-to-date", "integer", lambda o: dig(o, "status", "updatedReplicas", default=0)),
            col("Available", "integer", lambda o: dig(o, "status", "availableReplicas", default=0)),
            AGE,
            col("Containers", "string", _containers_cell(("spec", "template", "spec", "containers"), "name"), 1),
            col("Images", "string", _containers_cell(("spec", "template", "spec", "containers"), "image"), 1),
            col("Selector", "string", lambda o: label_selector_text(dig(o, "spec", "selector")), 1),
        ),
    ),
    KindInfo(
        "apps",
        "v1",
        "replicasets",
        "ReplicaSet",
        True,
        short_names=("rs",),
        categories=("all",),
        subresources=(_status("ReplicaSet"), _scale()),
        field_getters={"status.replicas": _getter("status", "replicas")},
        columns=(
            NAME,
            col("Desired", "integer", _replicas),
            col("Current", "integer", lambda o: dig(o, "status", "replicas", default=0)),
            col("Ready", "integer", lambda o: dig(o, "status", "readyReplicas", default=0)),
            AGE,
        ),
    ),
    KindInfo(
        "apps",
        "v1",
        "daemonsets",
        "DaemonSet",
        True,
        short_names=("ds",),
        categories=("all",),
        subresources=(_status("DaemonSet"),),
        columns=(
            NAME,
            col("Desired", "integer", lambda o: dig(o, "status", "desiredNumberScheduled", default=0)),
            col("Current", "integer", lambda o: dig(o, "status", "currentNumberScheduled", default=0)),
            col("Ready", "integer", lambda o: dig(o, "status", "numberReady", default=0)),
            col("Up-to-date", "integer", lambda o: dig(o, "status", "updatedNumberScheduled", default=0)),
            col("Available", "integer", lambda o: dig(o, "status", "numberAvailable", default=0)),
            col(
                "Node Selector", "string", lambda o: _selector_text(dig(o, "spec", "template", "spec", "nodeSelector"))
            ),
            AGE,
        ),
    ),
    KindInfo(
        "apps",
        "v1",
        "statefulsets",
        "StatefulSet",
        True,
        short_names=("sts",),
        categories=("all",),
        subresources=(_status("StatefulSet"), _scale()),
        columns=(NAME, col("Ready", "string", _ready_of), AGE),
    ),
    KindInfo(
        "apps",
        "v1",
        "controllerrevisions",
        "ControllerRevision",
        True,
        columns=(
            NAME,
            col(
                "Controller",
                "string",
                lambda o: _join(
                    f"{(r.get('kind') or '').lower()}.{(r.get('apiVersion') or '').split('/')[0]}/{r.get('name')}"
                    for r in dig(o, "metadata", "ownerReferences", default=[]) or []
                    if r.get("controller")
                ),
            ),
            col("Revision", "integer", _getter("revision")),
            AGE,
        ),
    ),
    # autoscaling/v2, then v1 (a view of the same stored objects: the first declaration of a
    # resource is the one stored and watched, the later ones are served by conversion) --------------------------------------------------------------------
    KindInfo(
        names.AUTOSCALING_GROUP,
        "v2",
        "horizontalpodautoscalers",
        "HorizontalPodAutoscaler",
        True,
        short_names=("hpa",),
        categories=("all",),
        subresources=(_status("HorizontalPodAutoscaler"),),
        columns=(
            NAME,
            col(
                "Reference",
                "string",
                lambda o: (
                    f"{dig(o, 'spec', 'scaleTargetRef', 'kind', default='')}/"
                    f"{dig(o, 'spec', 'scaleTargetRef', 'name', default='')}"
                ),
                description="The target whose scale the autoscaler sets.",
            ),
            col("Targets", "string", hpa_targets, description="The metrics: current value / target."),
            col("MinPods", "string", _hpa_min_pods, description="The fewest replicas the autoscaler sets."),
            col(
                "MaxPods",
                "integer",
                lambda o: dig(o, "spec", "maxReplicas", default=0),
                description="The most replicas the autoscaler sets.",
            ),
            col(
                "Replicas",
                "integer",
                lambda o: dig(o, "status", "currentReplicas", default=0),
                description="The replicas the target had when the autoscaler last looked.",
            ),
            AGE,
        ),
    ),
    KindInfo(
        names.AUTOSCALING_GROUP,
        "v1",
        "horizontalpodautoscalers",
        "HorizontalPodAutoscaler",
        True,
        short_names=("hpa",),
        # Tables, watches and writes other than create go to the stored version (v2).
        verbs=("create", "get", "list"),
    ),
    # batch/v1 --------------------------------------------------------------------------
    KindInfo(
        "batch",
        "v1",
        "jobs",
        "Job",
        True,
        categories=("all",),
        subresources=(_status("Job"),),
        field_getters={"status.successful": _getter("status", "succeeded")},
        columns=(
            NAME,
            col("Status", "string", _job_status),
            col("Completions", "string", _job_completions),
            col("Duration", "string", _job_duration),
            AGE,
        ),
    ),
    KindInfo(
        "batch",
        "v1",
        "cronjobs",
        "CronJob",
        True,
        short_names=("cj",),
        categories=("all",),
        subresources=(_status("CronJob"),),
        columns=(
            NAME,
            col("Schedule", "string", _getter("spec", "schedule")),
            col("Timezone", "string", _or_none(_getter("spec", "timeZone"))),
            col("Suspend", "boolean", lambda o: bool(dig(o, "spec", "suspend", default=False))),
            col("Active", "integer", lambda o: len(dig(o, "status", "active", default=[]) or [])),
            col(
                "Last Schedule",
                "string",
                lambda o: (
                    age(dig(o, "status", "lastScheduleTime")) if dig(o, "status", "lastScheduleTime") else "<none>"
                ),
            ),
            AGE,
        ),
    ),
    # coordination / events / discovery --------------------------------------------------
    KindInfo(
        names.COORDINATION_GROUP,
        "v1",
        "leases",
        "Lease",
        True,
        create_on_update=True,
        columns=(NAME, col("Holder", "string", _getter("spec", "holderIdentity")), AGE),
    ),
    KindInfo(
        names.EVENTS_GROUP,
        "v1",
        "events",
        "Event",
        True,
        short_names=("ev",),
        create_on_update=True,
        field_getters={
            "regarding.kind": _getter("regarding", "kind"),
            "regarding.namespace": _getter("regarding", "namespace"),
            "regarding.name": _getter("regarding", "name"),
            "regarding.uid": _getter("regarding", "uid"),
            "reason": _getter("reason"),
            "reportingController": _getter("reportingController"),
            "type": _getter("type"),
        },
    ),
    KindInfo(
        names.DISCOVERY_GROUP,
        "v1",
        "endpointslices",
        "EndpointSlice",
        True,
        columns=(
            NAME,
            col("AddressType", "string", _getter("addressType")),
            col("Ports", "string", lambda o: _join((p.get("port") for p in o.get("ports") or []), "<unset>")),
            col(
                "Endpoints",
                "string",
                lambda o: _join((a for e in o.get("endpoints") or [] for a in e.get("addresses") or []), "<unset>"),
            ),
            AGE,
        ),
    ),
    # networking ------------------------------------------------------------------------
    KindInfo(
        names.NETWORKING_GROUP,
        "v1",
        "ingresses",
        "Ingress",
        True,
        short_names=("ing",),
        subresources=(_status("Ingress"),),
        columns=(
            NAME,
            col("Class", "string", _or_none(_getter("spec", "ingressClassName"))),
            col("Hosts", "string", _ingress_hosts_cell),
            col(
                "Address",
                "string",
                lambda o: ",".join(
                    sorted(
                        {
                            str(i.get("ip") or i.get("hostname"))
                            for i in dig(o, "status", "loadBalancer", "ingress", default=[]) or []
                            if isinstance(i, dict) and (i.get("ip") or i.get("hostname"))
                        }
                    )
                ),
            ),
            col("Ports", "string", lambda o: "80, 443" if dig(o, "spec", "tls") else "80"),
            AGE,
        ),
    ),
    KindInfo(
        names.NETWORKING_GROUP,
        "v1",
        "ingressclasses",
        "IngressClass",
        False,
        columns=(
            NAME,
            col("Controller", "string", _getter("spec", "controller")),
            col("Parameters", "string", _ingress_class_parameters_cell),
            AGE,
        ),
    ),
    KindInfo(
        names.NETWORKING_GROUP,
        "v1",
        "networkpolicies",
        "NetworkPolicy",
        True,
        short_names=("netpol",),
        columns=(
            NAME,
            col("Pod-Selector", "string", lambda o: label_selector_text(dig(o, "spec", "podSelector"))),
            AGE,
        ),
    ),
    # certificates ----------------------------------------------------------------------
    KindInfo(
        names.CERTIFICATES_GROUP,
        "v1",
        "certificatesigningrequests",
        "CertificateSigningRequest",
        False,
        short_names=("csr",),
        subresources=(_status("CertificateSigningRequest"), _sub("approval", "CertificateSigningRequest")),
        field_getters={"spec.signerName": _getter("spec", "signerName")},
        columns=(
            NAME,
            AGE,
            col("SignerName", "string", _getter("spec", "signerName")),
            col("Requestor", "string", _getter("spec", "username")),
            col("RequestedDuration", "string", _csr_duration),
            col("Condition", "string", _csr_condition),
        ),
    ),
    # rbac ------------------------------------------------------------------------------
    KindInfo(
        names.RBAC_GROUP,
        "v1",
        "roles",
        "Role",
        True,
        create_on_update=True,
        columns=(NAME, col("Created At", "date", _getter("metadata", "creationTimestamp"))),
    ),
    KindInfo(
        names.RBAC_GROUP,
        "v1",
        "rolebindings",
        "RoleBinding",
        True,
        create_on_update=True,
        columns=(
            NAME,
            col("Role", "string", _role_ref),
            AGE,
            col("Users", "string", lambda o: _subjects(o, "User"), 1),
            col("Groups", "string", lambda o: _subjects(o, "Group"), 1),
            col("ServiceAccounts", "string", lambda o: _subjects(o, "ServiceAccount"), 1),
        ),
    ),
    KindInfo(
        names.RBAC_GROUP,
        "v1",
        "clusterroles",
        "ClusterRole",
        False,
        create_on_update=True,
        columns=(NAME, col("Created At", "date", _getter("metadata", "creationTimestamp"))),
    ),
    KindInfo(
        names.RBAC_GROUP,
        "v1",
        "clusterrolebindings",
        "ClusterRoleBinding",
        False,
        create_on_update=True,
        columns=(
            NAME,
            col("Role", "string", _role_ref),
            AGE,
            col("Users", "string", lambda o: _subjects(o, "User"), 1),
            col("Groups", "string", lambda o: _subjects(o, "Group"), 1),
            col("ServiceAccounts", "string", lambda o: _subjects(o, "ServiceAccount"), 1),
        ),
    ),
    # authorization: create-only reviews, answered by the authorizer and never stored --------
    KindInfo(names.AUTHORIZATION_GROUP, "v1", "subjectaccessreviews", "SubjectAccessReview", False, verbs=("create",)),
    KindInfo(
        names.AUTHORIZATION_GROUP, "v1", "selfsubjectaccessreviews", "SelfSubjectAccessReview", False, verbs=("create",)
    ),
    KindInfo(
        names.AUTHORIZATION_GROUP,
        "v1",
        "localsubjectaccessreviews",
        "LocalSubjectAccessReview",
        True,
        verbs=("create",),
    ),
    KindInfo(
        names.AUTHORIZATION_GROUP, "v1", "selfsubjectrulesreviews", "SelfSubjectRulesReview", False, verbs=("create",)
    ),
    # authentication: create-only reviews, answered by the authenticator and never stored ---
    KindInfo(names.AUTHENTICATION_GROUP, "v1", "tokenreviews", "TokenReview", False, verbs=("create",)),
    KindInfo(names.AUTHENTICATION_GROUP, "v1", "selfsubjectreviews", "SelfSubjectReview", False, verbs=("create",)),
    # metrics: read-only, served from the node agents' resource metrics, never stored -----
    KindInfo(names.METRICS_GROUP, "v1beta1", "nodes", "NodeMetrics", False, verbs=("get", "list")),
    KindInfo(names.METRICS_GROUP, "v1beta1", "pods", "PodMetrics", True, verbs=("get", "list")),
    # node / scheduling / policy / storage / admissionregistration ----------------------
    KindInfo(
        names.NODE_GROUP,
        "v1",
        "runtimeclasses",
        "RuntimeClass",
        False,
        create_on_update=True,
        columns=(NAME, col("Handler", "string", _getter("handler")), AGE),
    ),
    KindInfo(
        names.SCHEDULING_GROUP,
        "v1",
        "priorityclasses",
        "PriorityClass",
        False,
        short_names=("pc",),
        columns=(
            NAME,
            col("Value", "integer", _getter("value")),
            col("Global-Default", "boolean", lambda o: bool(o.get("globalDefault", False))),
            AGE,
            col("PreemptionPolicy", "string", _getter("preemptionPolicy")),
        ),
    ),
    KindInfo(
        "policy",
        "v1",
        "poddisruptionbudgets",
        "PodDisruptionBudget",
        True,
        short_names=("pdb",),
        subresources=(_status("PodDisruptionBudget"),),
        columns=(
            NAME,
            col("Min Available", "string", _or_none(_getter("spec", "minAvailable"))),
            col("Max Unavailable", "string", _or_none(_getter("spec", "maxUnavailable"))),
            col("Allowed Disruptions", "integer", lambda o: dig(o, "status", "disruptionsAllowed", default=0)),
            AGE,
        ),
    ),
    KindInfo(
        names.STORAGE_GROUP,
        "v1",
        "storageclasses",
        "StorageClass",
        False,
        short_names=("sc",),
        columns=(
            _STORAGE_CLASS_NAME,
            col("Provisioner", "string", _getter("provisioner")),
            col("ReclaimPolicy", "string", lambda o: o.get("reclaimPolicy") or "Delete"),
            col("VolumeBindingMode", "string", lambda o: o.get("volumeBindingMode") or "Immediate"),
            col("AllowVolumeExpansion", "boolean", lambda o: bool(o.get("allowVolumeExpansion", False))),
            AGE,
        ),
    ),
    KindInfo(
        names.ADMISSIONREGISTRATION_GROUP,
        "v1",
        "validatingwebhookconfigurations",
        "ValidatingWebhookConfiguration",
        False,
        columns=(NAME, col("Webhooks", "integer", lambda o: len(o.get("webhooks") or [])), AGE),
    ),
    KindInfo(
        names.ADMISSIONREGISTRATION_GROUP,
        "v1",
        "mutatingwebhookconfigurations",
        "MutatingWebhookConfiguration",
        False,
        columns=(NAME, col("Webhooks", "integer", lambda o: len(o.get("webhooks") or [])), AGE),
    ),
    KindInfo(
        names.ADMISSIONREGISTRATION_GROUP,
        "v1",
        "validatingadmissionpolicies",
        "ValidatingAdmissionPolicy",
        False,
        subresources=(Subresource("status", "ValidatingAdmissionPolicy", ("get", "patch", "update")),),
        categories=("api-extensions",),
        columns=(
            NAME,
            col("Validations", "integer", lambda o: len((o.get("spec") or {}).get("validations") or [])),
            col("ParamKind", "string", lambda o: _param_kind(o)),
            AGE,
        ),
    ),
    KindInfo(
        names.ADMISSIONREGISTRATION_GROUP,
        "v1",
        "validatingadmissionpolicybindings",
        "ValidatingAdmissionPolicyBinding",
        False,
        categories=("api-extensions",),
        columns=(
            NAME,
            col("PolicyName", "string", lambda o: (o.get("spec") or {}).get("policyName") or ""),
            col("ParamRef", "string", lambda o: _param_ref(o)),
            AGE,
        ),
    ),
    # flowcontrol: API priority and fairness (server/flowcontrol/) ------------------------
    KindInfo(
        names.FLOWCONTROL_GROUP,
        names.FLOWCONTROL_VERSION,
        "flowschemas",
        "FlowSchema",
        False,
        subresources=(_status("FlowSchema"),),
        columns=(
            NAME,
            col("PriorityLevel", "string", _getter("spec", "priorityLevelConfiguration", "name")),
            col("MatchingPrecedence", "string", lambda o: str(dig(o, "spec", "matchingPrecedence", default=""))),
            col("DistinguisherMethod", "string", _or_none(_getter("spec", "distinguisherMethod", "type"))),
            AGE,
            col("MissingPL", "string", lambda o: _flow_schema_missing_pl(o)),
        ),
    ),
    KindInfo(
        names.FLOWCONTROL_GROUP,
        names.FLOWCONTROL_VERSION,
        "prioritylevelconfigurations",
        "PriorityLevelConfiguration",
        False,
        subresources=(_status("PriorityLevelConfiguration"),),
        columns=(
            NAME,
            col("Type", "string", _getter("spec", "type")),
            col(
                "NominalConcurrencyShares",
                "string",
                lambda o: _or_none_text(dig(o, "spec", "limited", "nominalConcurrencyShares", default=None)),
            ),
            col(
                "Queues",
                "string",
                lambda o: _or_none_text(dig(o, "spec", "limited", "limitResponse", "queuing", "queues", default=None)),
            ),
            col(
                "HandSize",
                "string",
                lambda o: _or_none_text(
                    dig(o, "spec", "limited", "limitResponse", "queuing", "handSize", default=None)
                ),
            ),
            col(
                "QueueLengthLimit",
                "string",
                lambda o: _or_none_text(
                    dig(o, "spec", "limited", "limitResponse", "queuing", "queueLengthLimit", default=None)
                ),
            ),
            AGE,
        ),
    ),
    KindInfo(
        names.APIEXTENSIONS_GROUP,
        "v1",
        "customresourcedefinitions",
        "CustomResourceDefinition",
        False,
        short_names=("crd", "crds"),
        categories=("api-extensions",),
        subresources=(_status("CustomResourceDefinition"),),
        columns=(NAME, col("Created At", "date", lambda o: dig(o, "metadata", "creationTimestamp", default=""))),
    ),
)


class Registry:
    """Look-ups over the declarations, by resource, by kind and by group version.

    The built-in kinds are given at construction; kinds defined at run time (custom
    resources) are added and removed with :meth:`add` and :meth:`remove`. Each change
    is announced to the listeners (``listener(added, removed)``), so the parts that
    keep something per kind (the watch cache, the store's strategies, OpenAPI) follow.
    """

    def __init__(self, kinds: Iterable[KindInfo]):
        self.kinds: tuple[KindInfo, ...] = ()
        self._by_resource: dict[tuple[str, str, str], KindInfo] = {}
        self._by_kind: dict[tuple[str, str, str], KindInfo] = {}
        self.listeners: list[Callable[[tuple[KindInfo, ...], tuple[KindInfo, ...]], None]] = []
        self._index(tuple(kinds))

    def _index(self, kinds: tuple[KindInfo, ...]) -> None:
        by_resource: dict[tuple[str, str, str], KindInfo] = {}
        by_kind: dict[tuple[str, str, str], KindInfo] = {}
        for k in kinds:
            key = (k.group, k.version, k.resource)
            if key in by_resource:
                raise ValueError(f"kind registry: {k.qualified_resource}/{k.version} declared twice")
            by_resource[key] = k
            by_kind[(k.group, k.version, k.kind)] = k
        self.kinds, self._by_resource, self._by_kind = kinds, by_resource, by_kind

    def copy(self) -> "Registry":
        """A registry of the same kinds, without listeners (one per server)."""
        return Registry(self.kinds)

    def replace(self, add: Iterable[KindInfo] = (), remove: Iterable[KindInfo] = ()) -> None:
        """Remove ``remove`` and add (or replace, by group, version and resource) ``add``
        in one step, then tell the listeners."""
        added, removed = tuple(add), tuple(remove)
        gone = {(k.group, k.version, k.resource) for k in removed + added}
        kept = tuple(k for k in self.kinds if (k.group, k.version, k.resource) not in gone)
        self._index(kept + added)
        for listener in tuple(self.listeners):
            listener(added, removed)

    def by_resource(self, group: str, version: str, resource: str) -> KindInfo | None:
        return self._by_resource.get((group, version, resource))

    def by_kind(self, group: str, version: str, kind: str) -> KindInfo | None:
        return self._by_kind.get((group, version, kind))

    def by_api_version_kind(self, api_version: str, kind: str) -> KindInfo | None:
        group, _, version = api_version.rpartition("/")
        return self.by_kind(group, version, kind)

    def group_versions(self) -> list[tuple[str, str]]:
        seen: dict[tuple[str, str], None] = {}
        for k in self.kinds:
            seen.setdefault((k.group, k.version), None)
        return list(seen)

    def in_group_version(self, group: str, version: str) -> list[KindInfo]:
        return [k for k in self.kinds if k.group == group and k.version == version]

    def resolve(self, name: str) -> list[KindInfo]:
        """Kinds a user-typed resource name may mean: plural, singular, short name or kind."""
        n = name.lower()
        return [k for k in self.kinds if n in (k.resource, k.singular_name, k.kind.lower()) or n in k.short_names]


REGISTRY = Registry(KINDS)
