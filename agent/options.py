"""The node agent's flag table and command-line parser.

Every flag of ``orch-agent`` is declared once in :data:`OPTIONS`: its value
type, default, help group, help text, the ``AgentConfiguration`` field it
mirrors (if any), its allowed values and range, and its deprecation. The
parser (:func:`parse_args`), the config-file decoder (:mod:`agent.config`),
validation (:mod:`agent.validation`), ``--help`` and the tests all read this
one table.

Syntax follows the upstream node agent (Go pflag): ``--name=value`` or
``--name value``; booleans as ``--name`` or ``--name=false``; ``-v 2``,
``-v=2``, ``-v2`` and ``--v=2``; lists comma-separated and repeatable; maps as
``a=b,c=d`` (repeatable); eviction thresholds as ``memory.available<100Mi``;
``--manifest-url-header`` as ``Name:value``. The first use of a list or map flag
replaces its default (and the config file's value); later uses add to it.

Deprecation (the spec's rule 6): a flag that mirrors a config-file field is
deprecated in favour of the file, as upstream marks them; a few flags are
deprecated outright. Using one warns once; ``--deprecation-warnings=false``
silences the warnings.
"""

from __future__ import annotations

import dataclasses
import difflib
import ipaddress
import re
import types
from typing import Any, Callable, Mapping, Sequence

from apiserver_min.api import names
from apiserver_min.api.duration import DurationError, format_duration, parse_duration
from apiserver_min.api.quantity import Quantity, QuantityError, parse_quantity

from .featuregates import KNOWN_GATES, FeatureGateError, describe_known, parse_gate_list

__all__ = [
    "FlagError",
    "Option",
    "OPTIONS",
    "BY_FLAG",
    "BY_ATTR",
    "BY_FIELD",
    "GROUPS",
    "ParsedArgs",
    "parse_args",
    "format_help",
    "Taint",
    "MemoryReservation",
    "EVICTION_SIGNALS",
    "parse_threshold_value",
    "CONFIG_DEPRECATION",
]


class FlagError(ValueError):
    """A command-line problem; the message names the flag."""


# --- value types ------------------------------------------------------------------


class ValueType:
    """How one kind of value is read from a flag and from the config file."""

    name = "string"  # shown in --help
    no_value = None  # value implied by a bare ``--flag`` (booleans)
    repeatable = False  # later uses combine with earlier ones

    def parse(self, text: str) -> Any:
        raise NotImplementedError

    def combine(self, previous: Any, new: Any) -> Any:
        return new

    def from_file(self, value: Any) -> Any:
        """A decoded YAML/JSON value into the effective value; ValueError on a wrong type."""
        if not isinstance(value, str):
            raise ValueError(f"expected a string, got {_json_type(value)}")
        return self.parse(value)

    def show(self, value: Any) -> str:
        return "" if value is None else str(value)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "a number"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, Mapping):
        return "an object"
    return type(value).__name__


def _frozen_map(d: Mapping[str, Any]) -> Mapping[str, Any]:
    return types.MappingProxyType(dict(d))


class BoolType(ValueType):
    name = "bool"
    no_value = "true"

    def parse(self, text: str) -> bool:
        # Go's strconv.ParseBool.
        if text in ("1", "t", "T", "true", "TRUE", "True"):
            return True
        if text in ("0", "f", "F", "false", "FALSE", "False"):
            return False
        raise ValueError("expected true or false")

    def from_file(self, value: Any) -> bool:
        if not isinstance(value, bool):
            raise ValueError(f"expected a boolean, got {_json_type(value)}")
        return value

    def show(self, value: Any) -> str:
        return str(bool(value)).lower()


class StringType(ValueType):
    def parse(self, text: str) -> str:
        return text


class StringsType(ValueType):
    name = "strings"
    repeatable = True

    def parse(self, text: str) -> tuple[str, ...]:
        return tuple(p.strip() for p in text.split(",") if p.strip())

    def combine(self, previous, new):
        return tuple(previous) + tuple(new)

    def from_file(self, value: Any) -> tuple[str, ...]:
        if not isinstance(value, list):
            raise ValueError(f"expected a list of strings, got {_json_type(value)}")
        for i, item in enumerate(value):
            if not isinstance(item, str):
                raise ValueError(f"[{i}]: expected a string, got {_json_type(item)}")
        return tuple(value)

    def show(self, value: Any) -> str:
        return "[" + ",".join(value) + "]" if value else ""


class IntType(ValueType):
    def __init__(self, bits: int, name: str) -> None:
        self.bits = bits
        self.name = name
        self.lo = -(1 << (bits - 1))
        self.hi = (1 << (bits - 1)) - 1

    def _check(self, n: int) -> int:
        if not self.lo <= n <= self.hi:
            raise ValueError(f"value out of range for {self.name}")
        return n

    def parse(self, text: str) -> int:
        t = text.strip()
        try:
            n = int(t, 10)
        except ValueError:
            try:
                n = int(t, 0)  # 0x1f, 0o17, like Go's base-0 parsing
            except ValueError:
                raise ValueError(f"expected an integer ({self.name})") from None
        return self._check(n)

    def from_file(self, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                return self._check(int(value))
            raise ValueError(f"expected an integer ({self.name}), got {_json_type(value)}")
        return self._check(value)


class DurationType(ValueType):
    name = "duration"

    def parse(self, text: str):
        try:
            return parse_duration(text.strip())
        except DurationError as exc:
            raise ValueError(str(exc)) from None

    def show(self, value: Any) -> str:
        return format_duration(value)


class QuantityType(ValueType):
    name = "quantity"

    def parse(self, text: str) -> Quantity:
        try:
            return parse_quantity(text.strip())
        except QuantityError as exc:
            raise ValueError(str(exc)) from None

    def from_file(self, value: Any) -> Quantity:
        if isinstance(value, int) and not isinstance(value, bool):
            return parse_quantity(str(value))
        return super().from_file(value)


def _split_pairs(text: str, sep: str, what: str) -> list[tuple[str, str]]:
    out = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        key, found, value = part.partition(sep)
        key, value = key.strip(), value.strip()
        if not found or not key:
            raise ValueError(f"malformed pair {part!r}, expected {what}")
        out.append((key, value))
    return out


class MapType(ValueType):
    """``key=value`` pairs; values go through ``value_parser`` (string by default)."""

    repeatable = True

    def __init__(
        self,
        name: str = "mapStringString",
        sep: str = "=",
        value_parser: Callable[[str], Any] | None = None,
        key_check: Callable[[str], None] | None = None,
        file_scalars: bool = False,
    ) -> None:
        self.name = name
        self.sep = sep
        self.value_parser = value_parser
        self.key_check = key_check
        self.file_scalars = file_scalars  # accept numbers for values in the file

    def _value(self, key: str, raw: str) -> Any:
        if self.key_check is not None:
            self.key_check(key)
        if self.value_parser is None:
            return raw
        try:
            return self.value_parser(raw)
        except ValueError as exc:
            raise ValueError(f"{key}: {exc}") from None

    def parse(self, text: str) -> Mapping[str, Any]:
        what = f"<key>{self.sep}<value>"
        return _frozen_map({k: self._value(k, v) for k, v in _split_pairs(text, self.sep, what)})

    def combine(self, previous, new):
        return _frozen_map({**previous, **new})

    def from_file(self, value: Any) -> Mapping[str, Any]:
        if not isinstance(value, Mapping):
            raise ValueError(f"expected an object, got {_json_type(value)}")
        out = {}
        for k, v in value.items():
            if self.file_scalars and isinstance(v, (int, float)) and not isinstance(v, bool):
                v = str(v)
            if not isinstance(v, str):
                raise ValueError(f"{k}: expected a string, got {_json_type(v)}")
            out[k] = self._value(k, v)
        return _frozen_map(out)

    def show(self, value: Any) -> str:
        if not value:
            return ""
        return ",".join(f"{k}{self.sep}{self._show_value(v)}" for k, v in sorted(value.items()))

    @staticmethod
    def _show_value(v: Any) -> str:
        if hasattr(v, "total_seconds"):
            return format_duration(v)
        return str(v)


class FeatureGatesType(ValueType):
    name = "mapStringBool"
    repeatable = True

    def parse(self, text: str) -> Mapping[str, bool]:
        try:
            gates = parse_gate_list(text)
        except FeatureGateError as exc:
            raise ValueError(str(exc)) from None
        _check_gate_names(gates)
        return _frozen_map(gates)

    def combine(self, previous, new):
        return _frozen_map({**previous, **new})

    def from_file(self, value: Any) -> Mapping[str, bool]:
        if not isinstance(value, Mapping):
            raise ValueError(f"expected an object of gate names to booleans, got {_json_type(value)}")
        for k, v in value.items():
            if not isinstance(v, bool):
                raise ValueError(f"{k}: expected a boolean, got {_json_type(v)}")
        _check_gate_names(value)
        return _frozen_map(value)

    def show(self, value: Any) -> str:
        return ",".join(f"{k}={str(v).lower()}" for k, v in sorted(value.items())) if value else ""


def _check_gate_names(gates: Mapping[str, bool]) -> None:
    unknown = sorted(k for k in gates if k not in KNOWN_GATES)
    if unknown:
        raise ValueError("unrecognized feature gate" + ("s" if len(unknown) > 1 else "") + ": " + ", ".join(unknown))


EVICTION_SIGNALS = (
    "memory.available",
    "nodefs.available",
    "nodefs.inodesFree",
    "imagefs.available",
    "imagefs.inodesFree",
    "pid.available",
    "allocatableMemory.available",
)


def parse_threshold_value(text: str) -> str:
    """An eviction threshold or reclaim amount: a quantity or a percentage (``10%``).

    Returned as written (the config file's form); raises ValueError if neither.
    """
    t = text.strip()
    if t.endswith("%"):
        try:
            pct = float(t[:-1])
        except ValueError:
            raise ValueError(f"invalid percentage {t!r}") from None
        if not 0 <= pct <= 100:
            raise ValueError(f"percentage {t!r} must be between 0% and 100%")
        return t
    try:
        q = parse_quantity(t)
    except QuantityError as exc:
        raise ValueError(str(exc)) from None
    if q.sign() < 0:
        raise ValueError(f"quantity {t!r} must not be negative")
    return t


def _check_signal(key: str) -> None:
    if key not in EVICTION_SIGNALS:
        raise ValueError(f"unsupported eviction signal {key!r} (one of {', '.join(EVICTION_SIGNALS)})")


def _grace_period(text: str):
    try:
        d = parse_duration(text)
    except DurationError as exc:
        raise ValueError(str(exc)) from None
    if d.total_seconds() < 0:
        raise ValueError(f"grace period {text!r} must not be negative")
    return d


def _quantity_value(text: str) -> Quantity:
    try:
        return parse_quantity(text)
    except QuantityError as exc:
        raise ValueError(str(exc)) from None


def _percentage_value(text: str) -> int:
    m = re.fullmatch(r"(\d{1,3})%", text.strip())
    if not m or int(m.group(1)) > 100:
        raise ValueError(f"{text!r} is not a percentage between 0% and 100%")
    return int(m.group(1))


class HeaderMapType(ValueType):
    """``--manifest-url-header``: ``Name:value`` pairs, comma-separated and repeatable."""

    name = "colonSeparatedMultimapStringString"
    repeatable = True

    def parse(self, text: str) -> Mapping[str, tuple[str, ...]]:
        out: dict[str, tuple[str, ...]] = {}
        for key, value in _split_pairs(text, ":", "<header name>:<value>"):
            out[key] = out.get(key, ()) + (value,)
        return _frozen_map(out)

    def combine(self, previous, new):
        out = dict(previous)
        for k, v in new.items():
            out[k] = out.get(k, ()) + tuple(v)
        return _frozen_map(out)

    def from_file(self, value: Any):
        if not isinstance(value, Mapping):
            raise ValueError(f"expected an object of header names to lists of values, got {_json_type(value)}")
        out = {}
        for k, v in value.items():
            if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
                raise ValueError(f"{k}: expected a list of strings")
            out[k] = tuple(v)
        return _frozen_map(out)

    def show(self, value: Any) -> str:
        return ",".join(f"{k}:{v}" for k, vs in value.items() for v in vs) if value else ""


@dataclasses.dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: str

    def __str__(self) -> str:
        return f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"


TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


class TaintsType(ValueType):
    """``<key>=<value>:<effect>`` (or ``<key>:<effect>``), comma-separated and repeatable."""

    name = "taints"
    repeatable = True

    def _one(self, text: str) -> Taint:
        kv, sep, effect = text.rpartition(":")
        if not sep or not kv:
            raise ValueError(f"invalid taint spec {text!r}, expected <key>=<value>:<effect>")
        key, _, value = kv.partition("=")
        return self._make(key, value, effect, text)

    @staticmethod
    def _make(key: str, value: str, effect: str, shown: str) -> Taint:
        if not key:
            raise ValueError(f"invalid taint spec {shown!r}: empty key")
        if effect not in TAINT_EFFECTS:
            raise ValueError(
                f"invalid taint effect {effect!r} in {shown!r}, expected one of {', '.join(TAINT_EFFECTS)}"
            )
        return Taint(key, value, effect)

    def parse(self, text: str) -> tuple[Taint, ...]:
        return tuple(self._one(p.strip()) for p in text.split(",") if p.strip())

    def combine(self, previous, new):
        return tuple(previous) + tuple(new)

    def from_file(self, value: Any) -> tuple[Taint, ...]:
        if not isinstance(value, list):
            raise ValueError(f"expected a list of taints, got {_json_type(value)}")
        out = []
        for i, item in enumerate(value):
            if not isinstance(item, Mapping):
                raise ValueError(f"[{i}]: expected an object with key, value, effect")
            extra = set(item) - {"key", "value", "effect", "timeAdded"}
            if extra:
                raise ValueError(f"[{i}]: unknown field {sorted(extra)[0]!r}")
            key, val, effect = item.get("key", ""), item.get("value", ""), item.get("effect", "")
            if not all(isinstance(x, str) for x in (key, val, effect)):
                raise ValueError(f"[{i}]: key, value and effect must be strings")
            try:
                out.append(self._make(key, val, effect, f"{key}={val}:{effect}"))
            except ValueError as exc:
                raise ValueError(f"[{i}]: {exc}") from None
        return tuple(out)

    def show(self, value: Any) -> str:
        return ",".join(str(t) for t in value) if value else ""


@dataclasses.dataclass(frozen=True)
class MemoryReservation:
    numa_node: int
    limits: Mapping[str, Quantity]

    def __hash__(self) -> int:
        return hash((self.numa_node, tuple(sorted(self.limits.items()))))

    def __str__(self) -> str:
        return f"{self.numa_node}:" + ",".join(f"{k}={v}" for k, v in sorted(self.limits.items()))


class ReservedMemoryType(ValueType):
    """``<numa-node>:<resource>=<quantity>[,...]``, repeatable and ``;``-separated."""

    name = "reservedMemory"
    repeatable = True

    @staticmethod
    def _limits(numa: int, limits: Mapping[str, Any], shown: str) -> MemoryReservation:
        out: dict[str, Quantity] = {}
        for name, raw in limits.items():
            if name != "memory" and not name.startswith("hugepages-"):
                raise ValueError(f"{shown!r}: unsupported resource {name!r} (memory or hugepages-<size>)")
            try:
                out[name] = parse_quantity(str(raw))
            except QuantityError as exc:
                raise ValueError(f"{shown!r}: {exc}") from None
        if not out:
            raise ValueError(f"{shown!r}: no resources given")
        return MemoryReservation(numa, _frozen_map(out))

    def parse(self, text: str) -> tuple[MemoryReservation, ...]:
        out = []
        for part in text.split(";"):
            part = part.strip()
            if not part:
                continue
            node, sep, rest = part.partition(":")
            if not sep or not node.strip().isdigit():
                raise ValueError(f"invalid reserved memory {part!r}, expected <numa-node>:<resource>=<quantity>")
            pairs = dict(_split_pairs(rest, "=", "<resource>=<quantity>"))
            out.append(self._limits(int(node), pairs, part))
        return tuple(out)

    def combine(self, previous, new):
        return tuple(previous) + tuple(new)

    def from_file(self, value: Any):
        if not isinstance(value, list):
            raise ValueError(f"expected a list of {{numaNode, limits}}, got {_json_type(value)}")
        out = []
        for i, item in enumerate(value):
            if not isinstance(item, Mapping) or set(item) - {"numaNode", "limits"}:
                raise ValueError(f"[{i}]: expected an object with numaNode and limits")
            numa, limits = item.get("numaNode", 0), item.get("limits", {})
            if isinstance(numa, bool) or not isinstance(numa, int) or numa < 0:
                raise ValueError(f"[{i}].numaNode: expected a non-negative integer")
            if not isinstance(limits, Mapping):
                raise ValueError(f"[{i}].limits: expected an object")
            out.append(self._limits(numa, limits, f"[{i}]"))
        return tuple(out)

    def show(self, value: Any) -> str:
        return ";".join(str(r) for r in value) if value else ""


class VModuleType(ValueType):
    """``pattern=N,...`` per-module verbosity (klog's --vmodule)."""

    name = "pattern=N,..."

    def parse(self, text: str) -> tuple[tuple[str, int], ...]:
        out = []
        for key, value in _split_pairs(text, "=", "<pattern>=<level>"):
            if not value.isdigit():
                raise ValueError(f"{key}={value}: the level must be a non-negative integer")
            out.append((key, int(value)))
        return tuple(out)

    def from_file(self, value: Any):
        if not isinstance(value, list):
            raise ValueError(f"expected a list of {{filePattern, verbosity}}, got {_json_type(value)}")
        out = []
        for i, item in enumerate(value):
            if not isinstance(item, Mapping) or set(item) - {"filePattern", "verbosity"}:
                raise ValueError(f"[{i}]: expected an object with filePattern and verbosity")
            pat, lvl = item.get("filePattern"), item.get("verbosity", 0)
            if not isinstance(pat, str) or not pat:
                raise ValueError(f"[{i}].filePattern: expected a non-empty string")
            if isinstance(lvl, bool) or not isinstance(lvl, int) or lvl < 0:
                raise ValueError(f"[{i}].verbosity: expected a non-negative integer")
            out.append((pat, lvl))
        return tuple(out)

    def show(self, value: Any) -> str:
        return ",".join(f"{p}={n}" for p, n in value) if value else ""


class VersionType(ValueType):
    """``--version``, ``--version=raw`` (details), ``--version=false`` (no-op)."""

    name = "version[=true]"
    no_value = "true"

    def parse(self, text: str) -> str | None:
        if text == "raw":
            return "raw"
        try:
            return "true" if BoolType().parse(text) else None
        except ValueError:
            raise ValueError("expected true, false or raw") from None


# Singletons used in the table.
BOOL = BoolType()
STRING = StringType()
STRINGS = StringsType()
INT32 = IntType(32, "int32")
INT64 = IntType(64, "int")
DURATION = DurationType()
QUANTITY = QuantityType()
MAP = MapType()
RESERVED = MapType(value_parser=_quantity_value, file_scalars=True)
QOS_RESERVED = MapType(value_parser=_percentage_value)
EVICTION = MapType(name="mapStringString", sep="<", value_parser=parse_threshold_value, key_check=_check_signal)
RECLAIM = MapType(value_parser=parse_threshold_value, key_check=_check_signal)
GRACE = MapType(value_parser=_grace_period, key_check=_check_signal)
GATES = FeatureGatesType()
HEADERS = HeaderMapType()
TAINTS = TaintsType()
RESERVED_MEMORY = ReservedMemoryType()
VMODULE = VModuleType()
VERSION = VersionType()
HELP = BoolType()


# --- the table --------------------------------------------------------------------

CONFIG_DEPRECATION = "config-file"  # marker: deprecated in favour of the --config file

G_GENERAL = "General"
G_API = "API server connection"
G_TLS = "Serving and TLS"
G_AUTH = "Authentication and authorization"
G_NODE = "Node registration and status"
G_PODS = "Pod sources"
G_RUNTIME = "Container runtime and images"
G_RESOURCES = "Resources, cgroups and allocatable"
G_EVICTION = "Eviction"
G_NETWORK = "Networking and DNS"
G_VOLUMES = "Volumes"
G_PROCESS = "Process"
G_LOGGING = "Logging"
GROUPS = (
    G_GENERAL,
    G_API,
    G_TLS,
    G_AUTH,
    G_NODE,
    G_PODS,
    G_RUNTIME,
    G_RESOURCES,
    G_EVICTION,
    G_NETWORK,
    G_VOLUMES,
    G_PROCESS,
    G_LOGGING,
)

_UNSET = object()


@dataclasses.dataclass(frozen=True)
class Option:
    """One flag (or config-only field) of the node agent."""

    flag: str | None  # long name without dashes; None for config-only fields
    type: ValueType
    default: Any
    help: str
    group: str = G_GENERAL
    field: str | None = None  # AgentConfiguration path ("maxPods", "authentication.x509.clientCAFile")
    attr: str = ""  # attribute on the effective configuration
    deprecated: str | None = None  # a message, or CONFIG_DEPRECATION
    shorthand: str | None = None
    path: bool = False  # a relative path in the config file is resolved against its directory
    choices: tuple[str, ...] | None = None
    range: tuple[int | None, int | None] | None = None
    file_default: Any = _UNSET  # default when a config file is used and omits the field
    default_text: str | None = None  # how --help shows the default, when not the value itself

    @property
    def dashed(self) -> str:
        return f"--{self.flag}" if self.flag else ""

    @property
    def label(self) -> str:
        """How errors name it: ``maxPods (--max-pods)``, ``--node-labels`` or ``shutdownGracePeriod``."""
        if self.field and self.flag:
            return f"{self.field} ({self.dashed})"
        return self.field or self.dashed

    @property
    def default_for_file(self) -> Any:
        return self.default if self.file_default is _UNSET else self.file_default

    def deprecation_message(self) -> str | None:
        if self.deprecated == CONFIG_DEPRECATION:
            return (
                f"This parameter should be set via the config file specified by the agent's "
                f"--config flag (field {self.field})."
            )
        return self.deprecated


def _o(flag, type_, default, help_, group, field=None, **kw) -> Option:
    attr = kw.pop("attr", None) or (flag or "").replace("-", "_")
    if field is not None and "deprecated" not in kw and flag is not None:
        kw["deprecated"] = CONFIG_DEPRECATION
    return Option(flag, type_, default, help_, group, field, attr=attr, **kw)


def _cfg(field: str, type_, default, help_, group, attr: str, **kw) -> Option:
    """A config-file field without a flag."""
    return Option(None, type_, default, help_, group, field, attr=attr, **kw)


_D = parse_duration
_Q = parse_quantity
_M = _frozen_map
_PORT = (0, 65535)

OPTIONS: tuple[Option, ...] = (
    # General
    _o(
        "config",
        STRING,
        "",
        "The agent's configuration file (an AgentConfiguration, YAML or JSON). "
        "Flags given on the command line override its values; relative paths in it are resolved "
        "against its directory.",
        G_GENERAL,
        path=False,
    ),
    _o(
        "root-dir",
        STRING,
        names.AGENT_ROOT_DIR,
        "Directory for the agent's files (volume mounts, plugin state, checkpoints).",
        G_GENERAL,
    ),
    _o(
        "runonce",
        BOOL,
        False,
        "Run the pods from the local manifests (and --manifest-url) once, then exit; needs no API server.",
        G_GENERAL,
    ),
    _o(
        "feature-gates",
        GATES,
        _M({}),
        "Comma-separated <Name>=true|false pairs turning alpha and "
        "beta features on or off. Known gates:\n" + "\n".join(describe_known()),
        G_GENERAL,
        field="featureGates",
    ),
    _o(
        "deprecation-warnings",
        BOOL,
        True,
        "Warn once about each deprecated flag used (set false to silence the warnings).",
        G_GENERAL,
    ),
    _o("version", VERSION, None, "Print version information and quit; --version=raw prints more detail.", G_GENERAL),
    _o("help", HELP, False, "Show this help and quit.", G_GENERAL, shorthand="h"),
    # API server connection
    _o(
        "orchconfig",
        STRING,
        "",
        "Connection config (orchconfig) for the API server. Giving it "
        "selects API-server mode; omitting it selects standalone mode.",
        G_API,
    ),
    _o(
        "bootstrap-orchconfig",
        STRING,
        "",
        "Connection config used to obtain a client certificate "
        "when the file at --orchconfig is missing; the result is written to --orchconfig, with key "
        "and certificate in --cert-dir.",
        G_API,
    ),
    _o(
        "orch-api-qps",
        INT32,
        5,
        "Requests per second to the API server (events and node heartbeats excluded); 0 means the default.",
        G_API,
        field="orchAPIQPS",
        range=(0, None),
    ),
    _o(
        "orch-api-burst",
        INT32,
        10,
        "Burst of requests to the API server; 0 means the default.",
        G_API,
        field="orchAPIBurst",
        range=(0, None),
    ),
    _o(
        "orch-api-content-type",
        STRING,
        names.MEDIA_PROTOBUF,
        "Content type of requests sent to the API server.",
        G_API,
        field="orchAPIContentType",
        choices=(names.MEDIA_PROTOBUF, names.MEDIA_JSON),
    ),
    _o(
        "event-qps",
        INT32,
        5,
        "Events created per second; at least 0, 0 means the default.",
        G_API,
        field="eventRecordQPS",
        range=(0, None),
    ),
    _o(
        "event-burst",
        INT32,
        10,
        "Burst of event creation; at least 0, 0 means the default.",
        G_API,
        field="eventBurst",
        range=(0, None),
    ),
    _o(
        "master-service-namespace",
        STRING,
        names.NS_DEFAULT,
        "Namespace whose control-plane services are injected into pods as environment variables.",
        G_API,
        deprecated="This flag will be removed in a future version.",
    ),
    # Serving and TLS
    _o(
        "address",
        STRING,
        "0.0.0.0",
        "IP address the agent serves on (0.0.0.0 or :: for all interfaces and families).",
        G_TLS,
        field="address",
    ),
    _o("port", INT32, 10250, "Port the agent serves on.", G_TLS, field="port", range=(1, 65535)),
    _o(
        "read-only-port",
        INT32,
        10255,
        "Read-only port without authentication or authorization; 0 disables it. (The config file's default is 0.)",
        G_TLS,
        field="readOnlyPort",
        range=_PORT,
        file_default=0,
    ),
    _o("enable-server", BOOL, True, "Run the agent's server.", G_TLS, field="enableServer"),
    _o(
        "enable-debugging-handlers",
        BOOL,
        True,
        "Serve the endpoints for container logs and for running commands in containers.",
        G_TLS,
        field="enableDebuggingHandlers",
    ),
    _o(
        "contention-profiling",
        BOOL,
        False,
        "Lock contention profiling, when profiling is on.",
        G_TLS,
        field="enableContentionProfiling",
    ),
    _o(
        "healthz-bind-address",
        STRING,
        "127.0.0.1",
        "Address of the health server (/healthz).",
        G_TLS,
        field="healthzBindAddress",
    ),
    _o(
        "healthz-port",
        INT32,
        10248,
        "Port of the local health server; 0 disables it.",
        G_TLS,
        field="healthzPort",
        range=_PORT,
    ),
    _o(
        "cert-dir",
        STRING,
        names.AGENT_PKI_DIR,
        "Directory of the TLS certificates; ignored when --tls-cert-file and --tls-private-key-file are given.",
        G_TLS,
        default_text="<root-dir>/pki",
    ),
    _o(
        "tls-cert-file",
        STRING,
        "",
        "Serving certificate (PEM, intermediates after the leaf). "
        "Without it a self-signed pair is generated in --cert-dir.",
        G_TLS,
        field="tlsCertFile",
        path=True,
    ),
    _o(
        "tls-private-key-file",
        STRING,
        "",
        "Private key of --tls-cert-file (PEM).",
        G_TLS,
        field="tlsPrivateKeyFile",
        path=True,
    ),
    _o(
        "tls-cipher-suites",
        STRINGS,
        (),
        "Cipher suites for the server (Go names); the default set when empty.",
        G_TLS,
        field="tlsCipherSuites",
    ),
    _o(
        "tls-min-version",
        STRING,
        "",
        "Minimum TLS version: VersionTLS10, VersionTLS11, VersionTLS12 or VersionTLS13.",
        G_TLS,
        field="tlsMinVersion",
        choices=("", "VersionTLS10", "VersionTLS11", "VersionTLS12", "VersionTLS13"),
    ),
    _o(
        "rotate-certificates",
        BOOL,
        False,
        "Rotate the client certificate by requesting a new one from the API server as expiry nears.",
        G_TLS,
        field="rotateCertificates",
    ),
    _o(
        "rotate-server-certificates",
        BOOL,
        False,
        "Request the serving certificate from the API server (CertificateSigningRequest) and rotate it.",
        G_TLS,
        field="serverTLSBootstrap",
    ),
    # Authentication and authorization
    _o(
        "anonymous-auth",
        BOOL,
        True,
        "Serve requests no other authentication method rejects, as "
        "user system:anonymous in group system:unauthenticated. (The config file's default is "
        "false.)",
        G_AUTH,
        field="authentication.anonymous.enabled",
        file_default=False,
    ),
    _o(
        "authentication-token-webhook",
        BOOL,
        False,
        "Authenticate bearer tokens with the API server's token review API. (The config file's default is true.)",
        G_AUTH,
        field="authentication.webhook.enabled",
        file_default=True,
    ),
    _o(
        "authentication-token-webhook-cache-ttl",
        DURATION,
        _D("2m"),
        "How long token review results are cached.",
        G_AUTH,
        field="authentication.webhook.cacheTTL",
    ),
    _o(
        "client-ca-file",
        STRING,
        "",
        "CA bundle: a client certificate signed by one of these authenticates with its common name as identity.",
        G_AUTH,
        field="authentication.x509.clientCAFile",
        path=True,
    ),
    _o(
        "authorization-mode",
        STRING,
        "AlwaysAllow",
        "AlwaysAllow, or Webhook (the API server's access review API). (The config file's default is Webhook.)",
        G_AUTH,
        field="authorization.mode",
        choices=("AlwaysAllow", "Webhook"),
        file_default="Webhook",
    ),
    _o(
        "authorization-webhook-cache-authorized-ttl",
        DURATION,
        _D("5m"),
        "How long allowed access review results are cached.",
        G_AUTH,
        field="authorization.webhook.cacheAuthorizedTTL",
    ),
    _o(
        "authorization-webhook-cache-unauthorized-ttl",
        DURATION,
        _D("30s"),
        "How long denied access review results are cached.",
        G_AUTH,
        field="authorization.webhook.cacheUnauthorizedTTL",
    ),
    # Node registration and status
    _o("hostname-override", STRING, "", "Name used instead of the host name to identify the node.", G_NODE),
    _o(
        "node-ip",
        STRING,
        "",
        "IP address of the node, or a dual-stack pair (comma-separated); '::' prefers IPv6.",
        G_NODE,
    ),
    _o(
        "node-labels",
        MAP,
        _M({}),
        "Labels added when the node registers (key=value pairs). Keys "
        f"in the {names.DOMAIN} namespace must start with an allowed prefix "
        f"({', '.join(p.rstrip('/') for p in names.NODE_AGENT_LABEL_PREFIXES)}) or be one of the "
        "allowed labels.",
        G_NODE,
    ),
    _o("register-node", BOOL, True, "Register the node with the API server.", G_NODE, field="registerNode"),
    _o(
        "register-with-taints",
        TAINTS,
        (),
        "Taints the node registers with (<key>=<value>:<effect>, comma-separated).",
        G_NODE,
        field="registerWithTaints",
    ),
    _o(
        "provider-id",
        STRING,
        "",
        "Unique identifier of the node in the machine database (cloud provider).",
        G_NODE,
        field="providerID",
    ),
    _o(
        "node-status-update-frequency",
        DURATION,
        _D("10s"),
        "How often the node status is computed and posted.",
        G_NODE,
        field="nodeStatusUpdateFrequency",
    ),
    _o(
        "node-status-max-images",
        INT32,
        50,
        "Images reported in the node status; -1 means no limit.",
        G_NODE,
        field="nodeStatusMaxImages",
        range=(-1, None),
    ),
    _cfg(
        "nodeStatusReportFrequency",
        DURATION,
        _D("5m"),
        "How often the status is posted when nothing changed.",
        G_NODE,
        "node_status_report_frequency",
    ),
    _cfg(
        "nodeLeaseDurationSeconds",
        INT32,
        40,
        "Duration of the node's Lease.",
        G_NODE,
        "node_lease_duration_seconds",
        range=(1, None),
    ),
    _o(
        "cloud-provider",
        STRING,
        "",
        "Cloud provider for cloud services: empty, or 'external'.",
        G_NODE,
        choices=("", "external"),
        deprecated="Will be removed in 1.24 or later, in favor of removing cloud provider code from the agent.",
    ),
    _o(
        "cloud-config",
        STRING,
        "",
        "Path to the cloud provider configuration file.",
        G_NODE,
        deprecated="Will be removed in 1.24 or later, in favor of removing cloud provider code from the agent.",
    ),
    _o(
        "pod-cidr",
        STRING,
        "",
        "CIDR for pod IPs; standalone mode only (in API-server mode the control plane assigns it).",
        G_NODE,
        field="podCIDR",
    ),
    # Pod sources
    _o(
        "pod-manifest-path",
        STRING,
        "",
        "Directory (or file) of static pod manifests; dot-files are ignored.",
        G_PODS,
        field="staticPodPath",
        path=True,
    ),
    _o(
        "file-check-frequency",
        DURATION,
        _D("20s"),
        "How often the manifest path is checked for new data.",
        G_PODS,
        field="fileCheckFrequency",
    ),
    _o("manifest-url", STRING, "", "URL of extra pod manifests.", G_PODS, field="staticPodURL"),
    _o(
        "manifest-url-header",
        HEADERS,
        _M({}),
        "HTTP headers sent with --manifest-url requests (Name:value, comma-separated, repeatable).",
        G_PODS,
        field="staticPodURLHeader",
    ),
    _o(
        "http-check-frequency",
        DURATION,
        _D("20s"),
        "How often --manifest-url is fetched.",
        G_PODS,
        field="httpCheckFrequency",
    ),
    _o(
        "sync-frequency",
        DURATION,
        _D("1m"),
        "Maximum time between syncs of running pods and their configuration.",
        G_PODS,
        field="syncFrequency",
    ),
    _o("max-pods", INT32, 110, "Number of pods that can run on this node.", G_PODS, field="maxPods", range=(0, None)),
    _o(
        "pods-per-core",
        INT32,
        0,
        "Pods per core, capped by --max-pods; 0 disables the limit.",
        G_PODS,
        field="podsPerCore",
        range=(0, None),
    ),
    _o(
        "pod-max-pids",
        INT64,
        -1,
        "Process cap per pod; -1 means the node's capacity.",
        G_PODS,
        field="podPidsLimit",
        range=(-1, None),
    ),
    # Container runtime and images
    _o(
        "container-runtime",
        STRING,
        "remote",
        "Container runtime; only 'remote' is valid.",
        G_RUNTIME,
        choices=("remote",),
        deprecated="Will be removed in 1.27 as the only valid value is 'remote'.",
    ),
    _o(
        "container-runtime-endpoint",
        STRING,
        "",
        "Endpoint of the CRI runtime (unix socket path or "
        "unix:// URL), for example unix:///run/containerd/containerd.sock.",
        G_RUNTIME,
        field="containerRuntimeEndpoint",
    ),
    _o(
        "image-service-endpoint",
        STRING,
        "",
        "Endpoint of the CRI image service; the runtime endpoint when empty.",
        G_RUNTIME,
        field="imageServiceEndpoint",
    ),
    _o(
        "runtime-request-timeout",
        DURATION,
        _D("2m"),
        "Timeout of runtime requests except long-running ones (pull, logs, exec, attach).",
        G_RUNTIME,
        field="runtimeRequestTimeout",
    ),
    _o(
        "pod-infra-container-image",
        STRING,
        names.AGENT_PAUSE_IMAGE,
        "Image the image garbage "
        "collector never removes. The container runtime chooses and pulls the sandbox image itself "
        "(containerd's sandbox_image); the agent never pulls this one, and also keeps the runtime's "
        "own sandbox image from garbage collection.",
        G_RUNTIME,
        deprecated="Will be removed in a future release; the image garbage collector will get "
        "the sandbox image from the runtime.",
    ),
    _o("serialize-image-pulls", BOOL, True, "Pull images one at a time.", G_RUNTIME, field="serializeImagePulls"),
    _o(
        "registry-qps",
        INT32,
        5,
        "Image pulls per second; 0 means no limit.",
        G_RUNTIME,
        field="registryPullQPS",
        range=(0, None),
    ),
    _o(
        "registry-burst",
        INT32,
        10,
        "Burst of image pulls, with --registry-qps above 0.",
        G_RUNTIME,
        field="registryBurst",
        range=(0, None),
    ),
    _o(
        "image-gc-high-threshold",
        INT32,
        85,
        "Disk usage percent that always triggers image garbage collection; 0 to 100, 100 disables.",
        G_RUNTIME,
        field="imageGCHighThresholdPercent",
        range=(0, 100),
    ),
    _o(
        "image-gc-low-threshold",
        INT32,
        80,
        "Disk usage percent image garbage collection frees down to; 0 to 100, not above the high threshold.",
        G_RUNTIME,
        field="imageGCLowThresholdPercent",
        range=(0, 100),
    ),
    _o(
        "minimum-image-ttl-duration",
        DURATION,
        _D("2m"),
        "Minimum age of an unused image before garbage collection.",
        G_RUNTIME,
        field="imageMinimumGCAge",
    ),
    _o(
        "image-credential-provider-config",
        STRING,
        "",
        "Configuration file of the image credential provider plugins.",
        G_RUNTIME,
    ),
    _o(
        "image-credential-provider-bin-dir",
        STRING,
        "",
        "Directory of the image credential provider plugin binaries.",
        G_RUNTIME,
    ),
    _o(
        "azure-container-registry-config",
        STRING,
        "",
        "Path to the cloud container-registry configuration file.",
        G_RUNTIME,
    ),
    _o(
        "container-log-max-size",
        QUANTITY,
        _Q("10Mi"),
        "Size at which a container log is rotated (remote runtime only).",
        G_RUNTIME,
        field="containerLogMaxSize",
    ),
    _o(
        "container-log-max-files",
        INT32,
        5,
        "Container log files kept per container, at least 2 (remote runtime only).",
        G_RUNTIME,
        field="containerLogMaxFiles",
        range=(2, None),
    ),
    _o(
        "seccomp-default",
        BOOL,
        False,
        "Use RuntimeDefault as the default seccomp profile of all workloads.",
        G_RUNTIME,
        field="seccompDefault",
    ),
    _o(
        "streaming-connection-idle-timeout",
        DURATION,
        _D("4h"),
        "Idle timeout of streaming connections (exec, attach, port-forward).",
        G_RUNTIME,
        field="streamingConnectionIdleTimeout",
    ),
    _o(
        "maximum-dead-containers",
        INT32,
        -1,
        "Old container instances kept globally; negative disables the limit.",
        G_RUNTIME,
        deprecated="Use --eviction-hard or --eviction-soft instead. Will be removed in a future version.",
    ),
    _o(
        "maximum-dead-containers-per-container",
        INT32,
        1,
        "Old instances kept per container.",
        G_RUNTIME,
        deprecated="Use --eviction-hard or --eviction-soft instead. Will be removed in a future version.",
    ),
    _o(
        "minimum-container-ttl-duration",
        DURATION,
        _D("0s"),
        "Minimum age of a finished container before garbage collection.",
        G_RUNTIME,
        deprecated="Use --eviction-hard or --eviction-soft instead. Will be removed in a future version.",
    ),
    # Resources, cgroups and allocatable
    _o(
        "cgroup-driver",
        STRING,
        "cgroupfs",
        "cgroup driver: cgroupfs or systemd (must match the runtime's).",
        G_RESOURCES,
        field="cgroupDriver",
        choices=("cgroupfs", "systemd"),
    ),
    _o(
        "cgroup-root",
        STRING,
        "",
        "Optional root cgroup for pods (the runtime's default when empty).",
        G_RESOURCES,
        field="cgroupRoot",
    ),
    _o(
        "cgroups-per-qos",
        BOOL,
        True,
        f"Create the QoS cgroup hierarchy ({names.PODS_CGROUP}).",
        G_RESOURCES,
        field="cgroupsPerQOS",
    ),
    _o(
        "agent-cgroups",
        STRING,
        "",
        "Absolute name of the cgroup the agent moves itself into.",
        G_RESOURCES,
        field="agentCgroups",
    ),
    _o(
        "runtime-cgroups",
        STRING,
        "",
        "Absolute name of the cgroup for the container runtime.",
        G_RESOURCES,
        field="runtimeCgroups",
    ),
    _o(
        "system-cgroups",
        STRING,
        "",
        "Absolute name of the cgroup for non-kernel processes not already in a cgroup under '/'.",
        G_RESOURCES,
        field="systemCgroups",
    ),
    _o(
        "cpu-cfs-quota",
        BOOL,
        True,
        "Enforce CPU quota for containers with CPU limits.",
        G_RESOURCES,
        field="cpuCFSQuota",
    ),
    _o(
        "cpu-cfs-quota-period",
        DURATION,
        _D("100ms"),
        "CPU CFS quota period (1ms to 1s; other than 100ms needs the CustomCPUCFSQuotaPeriod gate).",
        G_RESOURCES,
        field="cpuCFSQuotaPeriod",
    ),
    _o(
        "cpu-manager-policy",
        STRING,
        "none",
        "CPU manager policy: none or static.",
        G_RESOURCES,
        field="cpuManagerPolicy",
        choices=("none", "static"),
    ),
    _o(
        "cpu-manager-policy-options",
        MAP,
        _M({}),
        "key=value options of the CPU manager policy.",
        G_RESOURCES,
        field="cpuManagerPolicyOptions",
    ),
    _o(
        "cpu-manager-reconcile-period",
        DURATION,
        _D("10s"),
        "CPU manager reconciliation period.",
        G_RESOURCES,
        field="cpuManagerReconcilePeriod",
    ),
    _o(
        "memory-manager-policy",
        STRING,
        "None",
        "Memory manager policy: None or Static.",
        G_RESOURCES,
        field="memoryManagerPolicy",
        choices=("None", "Static"),
    ),
    _o(
        "topology-manager-policy",
        STRING,
        "none",
        "Topology manager policy: none, best-effort, restricted or single-numa-node.",
        G_RESOURCES,
        field="topologyManagerPolicy",
        choices=("none", "best-effort", "restricted", "single-numa-node"),
    ),
    _o(
        "topology-manager-scope",
        STRING,
        "container",
        "Scope of topology hints: container or pod.",
        G_RESOURCES,
        field="topologyManagerScope",
        choices=("container", "pod"),
    ),
    _o(
        "orch-reserved",
        RESERVED,
        _M({}),
        "Resources reserved for orch system components "
        "(cpu, memory, ephemeral-storage, pid as <name>=<quantity> pairs).",
        G_RESOURCES,
        field="orchReserved",
    ),
    _o(
        "orch-reserved-cgroup",
        STRING,
        "",
        "Absolute name of the top-level cgroup of the orch system components (needed to enforce orch-reserved).",
        G_RESOURCES,
        field="orchReservedCgroup",
    ),
    _o(
        "system-reserved",
        RESERVED,
        _M({}),
        "Resources reserved for non-orch system components (<name>=<quantity> pairs).",
        G_RESOURCES,
        field="systemReserved",
    ),
    _o(
        "system-reserved-cgroup",
        STRING,
        "",
        "Absolute name of the top-level cgroup of the system components (needed to enforce system-reserved).",
        G_RESOURCES,
        field="systemReservedCgroup",
    ),
    _o(
        "reserved-cpus",
        STRING,
        "",
        "CPUs (a cpuset such as 0-3,8) reserved for system and orch "
        "components; overrides the cpu of --system-reserved and --orch-reserved.",
        G_RESOURCES,
        field="reservedSystemCPUs",
    ),
    _o(
        "reserved-memory",
        RESERVED_MEMORY,
        (),
        "Memory reserved per NUMA node for the memory "
        "manager (<numa-node>:<resource>=<quantity>[,...], repeatable or ';'-separated).",
        G_RESOURCES,
        field="reservedMemory",
    ),
    _o(
        "enforce-node-allocatable",
        STRINGS,
        ("pods",),
        "Levels of node allocatable to enforce: "
        f"none, or any of pods, system-reserved, {names.AGENT_RESERVED_LEVEL} (the reserved levels "
        "need their cgroup flags).",
        G_RESOURCES,
        field="enforceNodeAllocatable",
    ),
    _o(
        "qos-reserved",
        QOS_RESERVED,
        _M({}),
        "Percentage of resources reserved for higher QoS classes (memory=<0-100>%; needs the QOSReserved gate).",
        G_RESOURCES,
        field="qosReserved",
    ),
    _o(
        "local-storage-capacity-isolation",
        BOOL,
        True,
        "Isolate local ephemeral storage (emptyDir, writable layers, logs).",
        G_RESOURCES,
        field="localStorageCapacityIsolation",
    ),
    _o(
        "kernel-memcg-notification",
        BOOL,
        False,
        "Use kernel memcg notifications for memory eviction thresholds instead of polling.",
        G_RESOURCES,
        field="kernelMemcgNotification",
    ),
    _o(
        "experimental-allocatable-ignore-eviction",
        BOOL,
        False,
        "Ignore hard eviction thresholds when computing node allocatable.",
        G_RESOURCES,
        deprecated="Will be removed in 1.25 or later.",
    ),
    # Eviction
    _o(
        "eviction-hard",
        EVICTION,
        _M(
            {
                "imagefs.available": "15%",
                "memory.available": "100Mi",
                "nodefs.available": "10%",
                "nodefs.inodesFree": "5%",
            }
        ),
        "Hard eviction thresholds (<signal><<quantity or percent>, comma-separated).",
        G_EVICTION,
        field="evictionHard",
    ),
    _o(
        "eviction-soft",
        EVICTION,
        _M({}),
        "Soft eviction thresholds, e.g. memory.available<1.5Gi.",
        G_EVICTION,
        field="evictionSoft",
    ),
    _o(
        "eviction-soft-grace-period",
        GRACE,
        _M({}),
        "Grace periods of the soft thresholds, e.g. memory.available=1m30s.",
        G_EVICTION,
        field="evictionSoftGracePeriod",
    ),
    _o(
        "eviction-max-pod-grace-period",
        INT32,
        0,
        "Seconds pods get to terminate on a soft threshold; negative defers to the pod's own value.",
        G_EVICTION,
        field="evictionMaxPodGracePeriod",
    ),
    _o(
        "eviction-minimum-reclaim",
        RECLAIM,
        _M({}),
        "Minimum reclaim per signal, e.g. imagefs.available=2Gi.",
        G_EVICTION,
        field="evictionMinimumReclaim",
    ),
    _o(
        "eviction-pressure-transition-period",
        DURATION,
        _D("5m"),
        "Wait before leaving a pressure condition.",
        G_EVICTION,
        field="evictionPressureTransitionPeriod",
    ),
    # Networking and DNS
    _o(
        "cluster-dns",
        STRINGS,
        (),
        "DNS server IPs for pods with dnsPolicy ClusterFirst; all must serve the same records.",
        G_NETWORK,
        field="clusterDNS",
    ),
    _o(
        "cluster-domain",
        STRING,
        "",
        "Cluster search domain added to containers' resolv.conf.",
        G_NETWORK,
        field="clusterDomain",
    ),
    _o(
        "resolv-conf",
        STRING,
        "/etc/resolv.conf",
        "Resolver configuration used as the base of containers' DNS; empty disables inheritance.",
        G_NETWORK,
        field="resolvConf",
        path=True,
    ),
    _o(
        "hairpin-mode",
        STRING,
        "promiscuous-bridge",
        "Hairpin NAT mode: promiscuous-bridge, hairpin-veth or none.",
        G_NETWORK,
        field="hairpinMode",
        choices=("promiscuous-bridge", "hairpin-veth", "none"),
    ),
    _o(
        "make-iptables-util-chains",
        BOOL,
        True,
        "Ensure the iptables utility rules exist.",
        G_NETWORK,
        field="makeIPTablesUtilChains",
    ),
    _o(
        "iptables-masquerade-bit",
        INT32,
        14,
        "fwmark bit marking packets for SNAT (0 to 31; must match the network proxy).",
        G_NETWORK,
        field="iptablesMasqueradeBit",
        range=(0, 31),
    ),
    _o(
        "iptables-drop-bit",
        INT32,
        15,
        "fwmark bit marking packets to drop (0 to 31).",
        G_NETWORK,
        field="iptablesDropBit",
        range=(0, 31),
    ),
    _o(
        "allowed-unsafe-sysctls",
        STRINGS,
        (),
        "Unsafe sysctls (or patterns ending in '*') pods may set.",
        G_NETWORK,
        field="allowedUnsafeSysctls",
    ),
    # Volumes
    _o(
        "volume-plugin-dir",
        STRING,
        names.AGENT_VOLUME_PLUGIN_DIR,
        "Directory searched for third-party volume plugins.",
        G_VOLUMES,
        field="volumePluginDir",
    ),
    _o(
        "volume-stats-agg-period",
        DURATION,
        _D("1m"),
        "How often volume disk usage is computed; 0 or less disables it.",
        G_VOLUMES,
        field="volumeStatsAggPeriod",
    ),
    _o(
        "enable-controller-attach-detach",
        BOOL,
        True,
        "Let the attach/detach controller manage volume attachment; the agent does not.",
        G_VOLUMES,
        field="enableControllerAttachDetach",
    ),
    _o(
        "keep-terminated-pod-volumes",
        BOOL,
        False,
        "Keep volumes of terminated pods mounted (debugging aid).",
        G_VOLUMES,
        deprecated="Will be removed in a future version.",
    ),
    _o(
        "experimental-mounter-path",
        STRING,
        "mount",
        "Path of the mount binary.",
        G_VOLUMES,
        deprecated="Will be removed in 1.25 or later, in favor of using CSI.",
    ),
    # Process
    _o(
        "lock-file",
        STRING,
        "",
        "Lock file the agent holds while running (alpha); a second agent waits for it.",
        G_PROCESS,
    ),
    _o("exit-on-lock-contention", BOOL, False, "Exit when another process opens the lock file.", G_PROCESS),
    _o(
        "oom-score-adj",
        INT32,
        -999,
        "OOM score adjustment of the agent process, -1000 to 1000.",
        G_PROCESS,
        field="oomScoreAdj",
        range=(-1000, 1000),
    ),
    _o(
        "max-open-files",
        INT64,
        1000000,
        "Open-file limit of the agent process.",
        G_PROCESS,
        field="maxOpenFiles",
        range=(1, None),
    ),
    _o("fail-swap-on", BOOL, True, "Refuse to start while swap is on.", G_PROCESS, field="failSwapOn"),
    _cfg(
        "shutdownGracePeriod",
        DURATION,
        _D("0s"),
        "Time the node's shutdown is delayed to terminate pods.",
        G_PROCESS,
        "shutdown_grace_period",
    ),
    _cfg(
        "shutdownGracePeriodCriticalPods",
        DURATION,
        _D("0s"),
        "Part of shutdownGracePeriod reserved for critical pods.",
        G_PROCESS,
        "shutdown_grace_period_critical_pods",
    ),
    _cfg("enableProfilingHandler", BOOL, True, "Serve profiling endpoints.", G_PROCESS, "enable_profiling_handler"),
    _cfg("enableDebugFlagsHandler", BOOL, True, "Serve /debug/flags/v.", G_PROCESS, "enable_debug_flags_handler"),
    _cfg("enableSystemLogHandler", BOOL, True, "Serve /logs.", G_PROCESS, "enable_system_log_handler"),
    _cfg(
        "protectKernelDefaults",
        BOOL,
        False,
        "Fail when kernel tunables differ from the agent's defaults instead of changing them.",
        G_PROCESS,
        "protect_kernel_defaults",
    ),
    # Logging
    _o(
        "v",
        INT32,
        0,
        "Log verbosity (0 and up).",
        G_LOGGING,
        field="logging.verbosity",
        attr="verbosity",
        shorthand="v",
        range=(0, None),
        deprecated=None,
    ),
    _o(
        "vmodule",
        VMODULE,
        (),
        "Per-module verbosity: comma-separated pattern=N (a glob over module names).",
        G_LOGGING,
        field="logging.vmodule",
        deprecated=None,
    ),
    _o(
        "log-flush-frequency",
        DURATION,
        _D("5s"),
        "Maximum time between log flushes.",
        G_LOGGING,
        field="logging.flushFrequency",
        deprecated=None,
    ),
    _o(
        "logging-format",
        STRING,
        "text",
        "Log format: text, or json (needs the LoggingBetaOptions gate).",
        G_LOGGING,
        field="logging.format",
        choices=("text", "json"),
    ),
    _o(
        "log-json-split-stream",
        BOOL,
        False,
        "In json format, write errors to stderr and info to stdout (alpha; needs the LoggingAlphaOptions gate).",
        G_LOGGING,
        field="logging.options.json.splitStream",
    ),
    _o(
        "log-json-info-buffer-size",
        QUANTITY,
        _Q("0"),
        "In json format with split streams, the "
        "buffer size of the info stream (alpha; needs the LoggingAlphaOptions gate).",
        G_LOGGING,
        field="logging.options.json.infoBufferSize",
    ),
)

BY_FLAG: Mapping[str, Option] = types.MappingProxyType({o.flag: o for o in OPTIONS if o.flag})
BY_ATTR: Mapping[str, Option] = types.MappingProxyType({o.attr: o for o in OPTIONS})
BY_FIELD: Mapping[str, Option] = types.MappingProxyType({o.field: o for o in OPTIONS if o.field})
_BY_SHORT: Mapping[str, Option] = types.MappingProxyType({o.shorthand: o for o in OPTIONS if o.shorthand})

assert len(BY_FLAG) == sum(1 for o in OPTIONS if o.flag), "duplicate flag"
assert len(BY_ATTR) == len(OPTIONS), "duplicate attribute"
assert len(BY_FIELD) == sum(1 for o in OPTIONS if o.field), "duplicate config field"


# --- parsing ----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ParsedArgs:
    """What the command line said: values of the flags given, in the order first given."""

    values: Mapping[str, Any]  # attr -> typed value, explicit flags only
    explicit: tuple[str, ...]  # flag names as given, first use order
    deprecation_warnings: tuple[str, ...]
    show_help: bool = False
    show_version: str | None = None  # None, "true" or "raw"

    def given(self, flag: str) -> bool:
        return flag in self.explicit


def _invalid(opt: Option, text: str, reason: str) -> FlagError:
    return FlagError(f'invalid value "{text}" for flag {opt.dashed}: {reason}')


def _unknown(name: str, shorthand: bool = False) -> FlagError:
    if shorthand:
        return FlagError(f"unknown shorthand flag: {name!r} in -{name}")
    close = difflib.get_close_matches(name, list(BY_FLAG), n=1, cutoff=0.75)
    hint = f" (did you mean --{close[0]}?)" if close else ""
    return FlagError(f"unknown flag: --{name}{hint}")


def parse_args(argv: Sequence[str]) -> ParsedArgs:
    """Parse ``argv`` (without the program name); raise :class:`FlagError` on a bad flag."""
    values: dict[str, Any] = {}
    explicit: list[str] = []
    positional: list[str] = []
    args = list(argv)
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--":
            positional.extend(args[i:])
            break
        if arg.startswith("--"):
            name, eq, text = arg[2:].partition("=")
            opt = BY_FLAG.get(name)
            if opt is None:
                raise _unknown(name)
            has_value = bool(eq)
        elif arg.startswith("-") and len(arg) > 1:
            short = arg[1]
            opt = _BY_SHORT.get(short)
            if opt is None:
                raise _unknown(arg[1:], shorthand=True)
            rest = arg[2:]
            has_value = bool(rest)
            text = rest[1:] if rest.startswith("=") else rest
        else:
            positional.append(arg)
            continue
        if not has_value:
            if opt.type.no_value is not None:
                text = opt.type.no_value
            elif i < len(args):
                text = args[i]
                i += 1
            else:
                raise FlagError(f"flag needs an argument: {opt.dashed}")
        try:
            value = opt.type.parse(text)
        except ValueError as exc:
            raise _invalid(opt, text, str(exc)) from None
        if opt.attr in values and opt.type.repeatable:
            values[opt.attr] = opt.type.combine(values[opt.attr], value)
        else:
            values[opt.attr] = value
        if opt.flag not in explicit:
            explicit.append(opt.flag)
    if positional:
        raise FlagError(f"{names.AGENT_NAME} takes no arguments, got {' '.join(positional)!r} (sub-command: join)")
    warn = values.get("deprecation_warnings", True)
    warnings = []
    if warn:
        for flag in explicit:
            msg = BY_FLAG[flag].deprecation_message()
            if msg:
                warnings.append(f"Flag --{flag} has been deprecated, {msg}")
    return ParsedArgs(
        values=types.MappingProxyType(values),
        explicit=tuple(explicit),
        deprecation_warnings=tuple(warnings),
        show_help=bool(values.get("help", False)),
        show_version=values.get("version"),
    )


# --- help -------------------------------------------------------------------------


def _show_default(opt: Option) -> str:
    if opt.default_text is not None:
        return opt.default_text
    if opt.type is HELP or opt.type is VERSION:
        return ""
    if isinstance(opt.type, BoolType):
        return "true" if opt.default else ""  # pflag omits false defaults
    text = opt.type.show(opt.default)
    if isinstance(opt.type, StringType) and text:
        return f'"{text}"'
    return text


def format_help(width: int = 100) -> str:
    import textwrap

    lines = [
        f"usage: {names.AGENT_NAME} [flags]",
        f"       {names.AGENT_NAME} join ...",
        "",
        "The orch node agent: runs pods from static manifests, a manifest URL or the API server",
        "on a CRI runtime (containerd). With --orchconfig it works with the API server (API-server",
        "mode); without it, it runs local pods only (standalone mode).",
        "",
        "Most flags mirror a field of the --config file (an AgentConfiguration,",
        f"{names.AGENT_CONFIG_API_VERSION}) and are deprecated in favour of it; flags given on the",
        "command line override the file.",
    ]
    for group in GROUPS:
        opts = [o for o in OPTIONS if o.group == group and o.flag]
        if not opts:
            continue
        lines += ["", f"{group}:"]
        for o in opts:
            head = f"  -{o.shorthand}, --{o.flag}" if o.shorthand else f"      --{o.flag}"
            if o.type is not HELP and o.type is not VERSION and not isinstance(o.type, BoolType):
                head += f" {o.type.name}"
            elif o.type is VERSION:
                head += " version[=true]"
            body = o.help
            default = _show_default(o)
            if default:
                body += f" (default {default})"
            msg = o.deprecation_message()
            if msg:
                body += f" (DEPRECATED: {msg})"
            paragraphs = body.split("\n")
            wrapped = []
            for k, para in enumerate(paragraphs):
                wrapped += textwrap.wrap(para, width=width - 10) or [""]
            lines.append(head)
            lines += [" " * 10 + w for w in wrapped]
    return "\n".join(lines) + "\n"


# --- shared checks used by validation --------------------------------------------


def is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
        return True
    except ValueError:
        return False
