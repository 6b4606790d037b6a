"""ControllerRevisions (apps/v1): upstream's (v1.27) ValidateControllerRevision: ``data``
is required and never changes, ``revision`` is not negative."""

from __future__ import annotations

from ..api import validation as v
from .apps_daemonset import nonnegative
from .strategy import Strategy


class ControllerRevisionStrategy(Strategy):
    def validate(self, obj: dict) -> list[v.FieldError]:
        errs = super().validate(obj)
        if obj.get("data") is None:
            errs.append(v.FieldError.required("data", "data is mandatory"))
        return errs + nonnegative(obj, "revision", "revision")

    def validate_update(self, new: dict, old: dict) -> list[v.FieldError]:
        errs = super().validate_update(new, old)
        if new.get("data") != old.get("data"):
            errs.append(v.FieldError.invalid("data", new.get("data"), "field is immutable"))
        return errs
