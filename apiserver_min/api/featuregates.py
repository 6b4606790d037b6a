"""Feature gates: the mechanism both daemons share.

``--feature-gates`` (and the agent's config-file ``featureGates``) name gates as
``<Name>=true|false``. Rules (the spec's feature-gate life cycle and
deprecation rules 8 and 9):

* an unknown gate is an error;
* ``AllAlpha`` / ``AllBeta`` change the default of every alpha / beta gate
  that is not set explicitly (an explicit setting always wins, in any order);
* setting a GA or deprecated gate is accepted with a warning; a gate locked to
  its default cannot be set to the other value.

Each daemon declares its own table of known gates (:class:`GateSpec` per name,
including ``AllAlpha``/``AllBeta``); :class:`FeatureGates` is an immutable set of
values over such a table, read the same way by every component.
"""

from __future__ import annotations

import dataclasses
import enum
import types
from typing import Iterable, Mapping

__all__ = [
    "Stage",
    "GateSpec",
    "FeatureGateError",
    "FeatureGates",
    "parse_gate_list",
    "describe_known",
]


class Stage(str, enum.Enum):
    ALPHA = "ALPHA"
    BETA = "BETA"
    GA = "GA"
    DEPRECATED = "DEPRECATED"

    def __str__(self) -> str:
        return self.value


@dataclasses.dataclass(frozen=True)
class GateSpec:
    stage: Stage
    default: bool
    locked: bool = False  # GA gates locked to their default (upstream LockToDefault)


class FeatureGateError(ValueError):
    pass


_ALL_ALPHA = "AllAlpha"
_ALL_BETA = "AllBeta"


def _parse_bool(text: str) -> bool | None:
    # Go's strconv.ParseBool, which upstream uses for gate values.
    if text in ("1", "t", "T", "true", "TRUE", "True"):
        return True
    if text in ("0", "f", "F", "false", "FALSE", "False"):
        return False
    return None


def parse_gate_list(text: str) -> dict[str, bool]:
    """``A=true,B=false`` into a dict, syntax only (names are checked by :class:`FeatureGates`)."""
    out: dict[str, bool] = {}
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        name, sep, raw = part.partition("=")
        name = name.strip()
        if not sep or not name:
            raise FeatureGateError(f"missing bool value for {part!r} (expected <Name>=true|false)")
        value = _parse_bool(raw.strip())
        if value is None:
            raise FeatureGateError(f"invalid value of {name}={raw.strip()}, err: expected true or false")
        out[name] = value
    return out


class FeatureGates:
    """An immutable set of gate values over a table of known gates."""

    __slots__ = ("_known", "_explicit", "_effective", "_warnings")

    def __init__(self, explicit: Mapping[str, bool] | None, known: Mapping[str, GateSpec]) -> None:
        explicit = dict(explicit or {})
        unknown = sorted(n for n in explicit if n not in known)
        if unknown:
            raise FeatureGateError(
                "unrecognized feature gate" + ("s" if len(unknown) > 1 else "") + ": " + ", ".join(unknown)
            )
        warnings: list[str] = []
        for name, value in explicit.items():
            spec = known[name]
            if spec.locked and value != spec.default:
                raise FeatureGateError(
                    f"cannot set feature gate {name} to {str(value).lower()}, "
                    f"feature is locked to {str(spec.default).lower()}"
                )
            if spec.stage in (Stage.GA, Stage.DEPRECATED):
                warnings.append(
                    f"Setting {spec.stage} feature gate {name}={str(value).lower()}. "
                    "It will be removed in a future release."
                )
        all_alpha = explicit.get(_ALL_ALPHA)
        all_beta = explicit.get(_ALL_BETA)
        effective: dict[str, bool] = {}
        for name, spec in known.items():
            if name in explicit:
                effective[name] = explicit[name]
            elif spec.stage is Stage.ALPHA and all_alpha is not None and name != _ALL_ALPHA:
                effective[name] = all_alpha
            elif spec.stage is Stage.BETA and all_beta is not None and name != _ALL_BETA:
                effective[name] = all_beta
            else:
                effective[name] = spec.default
        self._known = known
        self._explicit = types.MappingProxyType(explicit)
        self._effective = types.MappingProxyType(effective)
        self._warnings = tuple(warnings)

    @classmethod
    def parse(cls, text: str, known: Mapping[str, GateSpec]) -> "FeatureGates":
        return cls(parse_gate_list(text), known)

    def enabled(self, name: str) -> bool:
        try:
            return self._effective[name]
        except KeyError:
            raise KeyError(f"feature gate {name!r} is not a known gate") from None

    def __contains__(self, name: object) -> bool:
        return name in self._effective

    @property
    def explicit(self) -> Mapping[str, bool]:
        """The gates set by flag or config file, as given."""
        return self._explicit

    @property
    def effective(self) -> Mapping[str, bool]:
        return self._effective

    @property
    def warnings(self) -> tuple[str, ...]:
        return self._warnings

    def merged(self, overrides: Mapping[str, bool]) -> "FeatureGates":
        """A new set where ``overrides`` win per gate (flags over the config file)."""
        return type(self)({**self._explicit, **overrides}, self._known)

    def stage(self, name: str) -> Stage:
        return self._known[name].stage

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, FeatureGates):
            return NotImplemented
        return dict(self._explicit) == dict(other._explicit) and self._known is other._known

    def __hash__(self) -> int:
        return hash(tuple(sorted(self._explicit.items())))

    def __repr__(self) -> str:
        inner = ",".join(f"{k}={str(v).lower()}" for k, v in sorted(self._explicit.items()))
        return f"FeatureGates({inner})"


def describe_known(known: Mapping[str, GateSpec]) -> Iterable[str]:
    """One line per gate, ``Name=true|false (STAGE - default=x)``, as upstream's help lists them."""
    for name in sorted(known, key=str.lower):
        spec = known[name]
        if spec.stage is Stage.GA and spec.locked:
            continue  # upstream's help omits locked GA gates too
        yield f"{name}=true|false ({spec.stage} - default={str(spec.default).lower()})"
