"""Eviction thresholds: parsed from the agent's options, compared with observations.

A threshold is a signal, an amount (a quantity, or a percentage of the signal's
capacity), a grace period (0 for a hard threshold) and an optional minimum
reclaim. The rules are upstream's:

* ``0%`` and ``100%`` switch a threshold off; a quantity must be positive;
* every soft threshold needs its grace period;
* with ``pods`` in ``--enforce-node-allocatable`` each hard ``memory.available``
  threshold is copied to ``allocatableMemory.available`` (the pods' own cgroup);
* a percentage is a float32 fraction of the capacity, the product truncated;
* a threshold is met while ``available < amount``; once met, it stays met until
  ``available >= amount + minimum reclaim``.
"""

from __future__ import annotations

import dataclasses
import struct
from typing import Any, Iterable, Mapping

from apiserver_min.api.duration import parse_duration
from apiserver_min.api.quantity import Format, Quantity, QuantityError, parse_quantity

__all__ = [
    "Threshold",
    "ThresholdValue",
    "ThresholdError",
    "parse_thresholds",
    "threshold_quantity",
    "SIGNAL_MEMORY",
    "SIGNAL_ALLOCATABLE_MEMORY",
    "SIGNAL_NODEFS",
    "SIGNAL_NODEFS_INODES",
    "SIGNAL_IMAGEFS",
    "SIGNAL_IMAGEFS_INODES",
    "SIGNAL_PID",
    "SIGNAL_TO_CONDITION",
    "SIGNAL_TO_RESOURCE",
    "RESOURCE_MEMORY",
    "RESOURCE_STORAGE",
    "RESOURCE_INODES",
    "RESOURCE_PIDS",
]

SIGNAL_MEMORY = "memory.available"
SIGNAL_ALLOCATABLE_MEMORY = "allocatableMemory.available"
SIGNAL_NODEFS = "nodefs.available"
SIGNAL_NODEFS_INODES = "nodefs.inodesFree"
SIGNAL_IMAGEFS = "imagefs.available"
SIGNAL_IMAGEFS_INODES = "imagefs.inodesFree"
SIGNAL_PID = "pid.available"

MEMORY_PRESSURE = "MemoryPressure"
DISK_PRESSURE = "DiskPressure"
PID_PRESSURE = "PIDPressure"

SIGNAL_TO_CONDITION: Mapping[str, str] = {
    SIGNAL_MEMORY: MEMORY_PRESSURE,
    SIGNAL_ALLOCATABLE_MEMORY: MEMORY_PRESSURE,
    SIGNAL_IMAGEFS: DISK_PRESSURE,
    SIGNAL_NODEFS: DISK_PRESSURE,
    SIGNAL_IMAGEFS_INODES: DISK_PRESSURE,
    SIGNAL_NODEFS_INODES: DISK_PRESSURE,
    SIGNAL_PID: PID_PRESSURE,
}

# The resource a signal starves (inodes and pids are the manager's own names, as upstream's).
RESOURCE_MEMORY = "memory"
RESOURCE_STORAGE = "ephemeral-storage"
RESOURCE_INODES = "inodes"
RESOURCE_PIDS = "pids"
SIGNAL_TO_RESOURCE: Mapping[str, str] = {
    SIGNAL_MEMORY: RESOURCE_MEMORY,
    SIGNAL_ALLOCATABLE_MEMORY: RESOURCE_MEMORY,
    SIGNAL_IMAGEFS: RESOURCE_STORAGE,
    SIGNAL_IMAGEFS_INODES: RESOURCE_INODES,
    SIGNAL_NODEFS: RESOURCE_STORAGE,
    SIGNAL_NODEFS_INODES: RESOURCE_INODES,
    SIGNAL_PID: RESOURCE_PIDS,
}
_BINARY_SIGNALS = frozenset({SIGNAL_MEMORY, SIGNAL_ALLOCATABLE_MEMORY, SIGNAL_NODEFS, SIGNAL_IMAGEFS})


class ThresholdError(ValueError):
    """An eviction setting that cannot be used; the message names the option and the signal."""


def _float32(x: float) -> float:
    return struct.unpack("f", struct.pack("f", x))[0]


@dataclasses.dataclass(frozen=True)
class ThresholdValue:
    """A quantity (``quantity`` set, in bytes or a count) or a fraction of capacity."""

    quantity: Quantity | None = None
    percentage: float = 0.0  # float32 fraction, 0.1 for "10%"

    def __str__(self) -> str:
        if self.quantity is not None:
            return self.quantity.canonical()
        return f"{self.percentage * 100:g}%"


@dataclasses.dataclass(frozen=True)
class Threshold:
    signal: str
    value: ThresholdValue
    grace_period: float = 0.0  # seconds; 0 is a hard threshold
    min_reclaim: ThresholdValue | None = None

    @property
    def hard(self) -> bool:
        return self.grace_period == 0

    def describe(self) -> str:
        kind = "hard" if self.hard else f"soft (grace {self.grace_period:g}s)"
        return f"{self.signal}<{self.value} {kind}"


def threshold_quantity(value: ThresholdValue, capacity: int) -> Quantity:
    """The amount a threshold value stands for, given the signal's capacity (upstream's
    GetThresholdQuantity: a percentage gives a binary quantity of the truncated product)."""
    if value.quantity is not None:
        return value.quantity
    return Quantity(int(float(capacity) * value.percentage), Format.BINARY_SI)


def _percentage(text: str, where: str) -> float:
    try:
        pct = float(text.rstrip("%"))
    except ValueError:
        raise ThresholdError(f"{where}: invalid percentage {text!r}") from None
    return _float32(_float32(pct) / 100)


def _parse_value(signal: str, text: Any, where: str) -> ThresholdValue | None:
    t = str(text).strip()
    if t.endswith("%"):
        if t in ("0%", "100%"):
            return None
        pct = _percentage(t, where)
        if pct < 0:
            raise ThresholdError(f"{where}: eviction percentage threshold {signal} must be >= 0%: {t}")
        if pct > 1:
            raise ThresholdError(f"{where}: eviction percentage threshold {signal} must be <= 100%: {t}")
        return ThresholdValue(percentage=pct)
    try:
        q = parse_quantity(t)
    except QuantityError as exc:
        raise ThresholdError(f"{where}: {signal}: {exc}") from None
    if q.sign() <= 0:
        raise ThresholdError(f"{where}: eviction threshold {signal} must be positive: {t}")
    return ThresholdValue(quantity=q)


def _parse_reclaim(signal: str, text: Any) -> ThresholdValue:
    where = "--eviction-minimum-reclaim"
    t = str(text).strip()
    if t.endswith("%"):
        pct = _percentage(t, where)
        if pct <= 0:
            raise ThresholdError(f"{where}: eviction percentage minimum reclaim {signal} must be positive: {t}")
        return ThresholdValue(percentage=pct)
    try:
        q = parse_quantity(t)
    except QuantityError as exc:
        raise ThresholdError(f"{where}: {signal}: {exc}") from None
    if q.sign() < 0:
        raise ThresholdError(f"{where}: negative eviction minimum reclaim specified for {signal}")
    return ThresholdValue(quantity=q)


def _seconds(value: Any, signal: str) -> float:
    if hasattr(value, "total_seconds"):
        seconds = float(value.total_seconds())
    else:
        try:
            seconds = parse_duration(str(value)).total_seconds()
        except ValueError as exc:
            raise ThresholdError(f"--eviction-soft-grace-period: {signal}: {exc}") from None
    if seconds < 0:
        raise ThresholdError(
            f"--eviction-soft-grace-period: invalid eviction grace period specified: {value}, must be a positive value"
        )
    return seconds


def _check_signal(signal: str, where: str) -> None:
    if signal not in SIGNAL_TO_RESOURCE:
        raise ThresholdError(f"{where}: unsupported eviction signal {signal}")


def parse_thresholds(
    hard: Mapping[str, Any] | None,
    soft: Mapping[str, Any] | None = None,
    soft_grace: Mapping[str, Any] | None = None,
    min_reclaim: Mapping[str, Any] | None = None,
    enforce_node_allocatable: Iterable[str] = (),
) -> list[Threshold]:
    """The thresholds of the eviction options (see the module docstring)."""
    reclaims: dict[str, ThresholdValue] = {}
    for signal, text in (min_reclaim or {}).items():
        _check_signal(signal, "--eviction-minimum-reclaim")
        reclaims[signal] = _parse_reclaim(signal, text)
    graces: dict[str, float] = {}
    for signal, value in (soft_grace or {}).items():
        _check_signal(signal, "--eviction-soft-grace-period")
        graces[signal] = _seconds(value, signal)
    out: list[Threshold] = []
    for signal, text in sorted((hard or {}).items()):
        _check_signal(signal, "--eviction-hard")
        value = _parse_value(signal, text, "--eviction-hard")
        if value is not None:
            out.append(Threshold(signal, value, 0.0, reclaims.get(signal)))
    for signal, text in sorted((soft or {}).items()):
        _check_signal(signal, "--eviction-soft")
        value = _parse_value(signal, text, "--eviction-soft")
        if value is None:
            continue
        if signal not in graces:
            raise ThresholdError(
                f"--eviction-soft: grace period must be specified for the soft eviction threshold {signal}"
            )
        out.append(Threshold(signal, value, graces[signal], reclaims.get(signal)))
    if "pods" in tuple(enforce_node_allocatable or ()):
        out += [
            Threshold(SIGNAL_ALLOCATABLE_MEMORY, t.value, 0.0, t.min_reclaim)
            for t in list(out)
            if t.signal == SIGNAL_MEMORY and t.hard
        ]
    return out


def quantity_for(signal: str, amount: int) -> Quantity:
    """An observed amount of a signal as upstream prints it (bytes binary, counts decimal)."""
    return Quantity(int(amount), Format.BINARY_SI if signal in _BINARY_SIGNALS else Format.DECIMAL_SI)


__all__ += ["quantity_for", "MEMORY_PRESSURE", "DISK_PRESSURE", "PID_PRESSURE"]
