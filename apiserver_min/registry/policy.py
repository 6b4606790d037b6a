"""The policy family: PodDisruptionBudget (``policy/v1``); the Eviction it guards is
``eviction.py``."""

from __future__ import annotations

import re
from typing import Any

from ..api import validation as v
from ..api.selectors import validate_label_selector
from .strategy import Strategy

_PERCENT = re.compile(r"^[0-9]+%$")
PERCENT_MESSAGE = (
    "a valid percent string must be a numeric string followed by an ending '%' "
    "(e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')"
)
STATUS_COUNTS = ("disruptionsAllowed", "currentHealthy", "desiredHealthy", "expectedPods")


def int_or_percent_errors(value: Any, path: str) -> list[v.FieldError]:
    """A non-negative integer or a percentage of at most 100%."""
    if isinstance(value, bool):
        return [v.FieldError.type_invalid(path, value, "must be an integer or a percentage")]
    if isinstance(value, int):
        return [] if value >= 0 else [v.FieldError.invalid(path, value, "must be greater than or equal to 0")]
    if isinstance(value, str):
        if not _PERCENT.match(value):
            return [v.FieldError.invalid(path, value, PERCENT_MESSAGE)]
        if int(value[:-1]) > 100:
            return [v.FieldError.invalid(path, value, "must not be greater than 100%")]
        return []
    return [v.FieldError.type_invalid(path, value, "must be an integer or a percentage")]


class PodDisruptionBudgetStrategy(Strategy):
    """Spec: at most one of ``minAvailable`` and ``maxUnavailable``, each a non-negative
    integer or a percentage; a valid selector. Status: non-negative counts."""

    def validate(self, obj: dict) -> list[v.FieldError]:
        errs = super().validate(obj)
        spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
        assert isinstance(spec, dict)
        if spec.get("minAvailable") is not None and spec.get("maxUnavailable") is not None:
            errs.append(v.FieldError.invalid("spec", spec, "minAvailable and maxUnavailable cannot be both set"))
        for field in ("minAvailable", "maxUnavailable"):
            if spec.get(field) is not None:
                errs += int_or_percent_errors(spec[field], f"spec.{field}")
        if isinstance(spec.get("selector"), dict):
            errs += validate_label_selector(spec["selector"], "spec.selector")
        status = obj.get("status")
        if isinstance(status, dict):
            for field in STATUS_COUNTS:
                value = status.get(field)
                if isinstance(value, int) and not isinstance(value, bool) and value < 0:
                    errs.append(v.FieldError.invalid(f"status.{field}", value, "must be greater than or equal to 0"))
        return errs
