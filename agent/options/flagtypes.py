"""The value types of the agent's flags and config fields.

Each :class:`ValueType` parses a flag's text (Go pflag syntax), decodes the
config file's JSON value, and shows a value back as ``--help`` and ``/configz``
write it. The types are the vocabulary of the flag table (:mod:`.table`).
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
import types
from typing import Any, Callable, Mapping

from apiserver_min.api.duration import DurationError, format_duration, parse_duration
from apiserver_min.api.quantity import Quantity, QuantityError, parse_quantity

from ..featuregates import KNOWN_GATES, FeatureGateError, parse_gate_list


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


def frozen_map(d: Mapping[str, Any]) -> Mapping[str, Any]:
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
        return frozen_map({k: self._value(k, v) for k, v in _split_pairs(text, self.sep, what)})

    def combine(self, previous, new):
        return frozen_map({**previous, **new})

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
        return frozen_map(out)

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
        return frozen_map(gates)

    def combine(self, previous, new):
        return frozen_map({**previous, **new})

    def from_file(self, value: Any) -> Mapping[str, bool]:
        if not isinstance(value, Mapping):
            raise ValueError(f"expected an object of gate names to booleans, got {_json_type(value)}")
        for k, v in value.items():
            if not isinstance(v, bool):
                raise ValueError(f"{k}: expected a boolean, got {_json_type(v)}")
        _check_gate_names(value)
        return frozen_map(value)

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
        return frozen_map(out)

    def combine(self, previous, new):
        out = dict(previous)
        for k, v in new.items():
            out[k] = out.get(k, ()) + tuple(v)
        return frozen_map(out)

    def from_file(self, value: Any):
        if not isinstance(value, Mapping):
            raise ValueError(f"expected an object of header names to lists of values, got {_json_type(value)}")
        out = {}
        for k, v in value.items():
            if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
                raise ValueError(f"{k}: expected a list of strings")
            out[k] = tuple(v)
        return frozen_map(out)

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
        return MemoryReservation(numa, frozen_map(out))

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


@dataclasses.dataclass(frozen=True)
class ShutdownGracePeriodByPodPriority:
    """One entry of ``shutdownGracePeriodByPodPriority``: pods of ``priority`` and up (to
    the next entry) get ``shutdown_grace_period_seconds`` during a node shutdown."""

    priority: int
    shutdown_grace_period_seconds: int

    def __str__(self) -> str:
        return f"{self.priority}={self.shutdown_grace_period_seconds}s"


class ShutdownByPriorityType(ValueType):
    """``shutdownGracePeriodByPodPriority``: a list of ``{priority, shutdownGracePeriodSeconds}``
    (config file only, as upstream)."""

    name = "shutdownGracePeriodByPodPriority"

    def parse(self, text: str) -> tuple[ShutdownGracePeriodByPodPriority, ...]:
        raise ValueError("shutdownGracePeriodByPodPriority is set in the config file only")

    def from_file(self, value: Any) -> tuple[ShutdownGracePeriodByPodPriority, ...]:
        if not isinstance(value, list):
            raise ValueError(f"expected a list of {{priority, shutdownGracePeriodSeconds}}, got {_json_type(value)}")
        out = []
        for i, item in enumerate(value):
            if not isinstance(item, Mapping):
                raise ValueError(f"[{i}]: expected an object with priority and shutdownGracePeriodSeconds")
            extra = set(item) - {"priority", "shutdownGracePeriodSeconds"}
            if extra:
                raise ValueError(f"[{i}]: unknown field {sorted(extra)[0]!r}")
            prio, seconds = item.get("priority", 0), item.get("shutdownGracePeriodSeconds", 0)
            for field, v in (("priority", prio), ("shutdownGracePeriodSeconds", seconds)):
                if isinstance(v, bool) or not isinstance(v, int):
                    raise ValueError(f"[{i}].{field}: expected an integer, got {_json_type(v)}")
            if not -(2**31) <= prio < 2**31:
                raise ValueError(f"[{i}].priority: {prio} is out of the 32-bit integer range")
            out.append(ShutdownGracePeriodByPodPriority(prio, seconds))
        return tuple(out)

    def show(self, value: Any) -> str:
        return ",".join(str(v) for v in value) if value else ""


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
SHUTDOWN_BY_PRIORITY = ShutdownByPriorityType()
VMODULE = VModuleType()
VERSION = VersionType()
HELP = BoolType()


# --- shared checks used by validation --------------------------------------------


def is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
        return True
    except ValueError:
        return False
