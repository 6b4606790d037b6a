"""The admissionregistration family: webhook configurations."""

from __future__ import annotations

from ..api import validation as v
from .strategy import Strategy


class WebhookConfigurationStrategy(Strategy):
    """Validating and mutating webhook configurations. A new webhook must declare no
    side effects (``None`` or ``NoneOnDryRun``); a configuration stored with a
    webhook that has side effects may keep them on update, as upstream allows."""

    SIDE_EFFECTS = ("None", "NoneOnDryRun", "Some", "Unknown")

    def validate_update(self, new: dict, old: dict) -> list[v.FieldError]:
        errs = super().validate_update(new, old)
        hooks = old.get("webhooks")
        if not isinstance(hooks, list):
            hooks = []
        if any(isinstance(h, dict) and h.get("sideEffects") not in (None, "None", "NoneOnDryRun") for h in hooks):
            errs = [
                e
                for e in errs
                if not (
                    e.type == v.FIELD_VALUE_NOT_SUPPORTED
                    and e.field.endswith(".sideEffects")
                    and e.value in self.SIDE_EFFECTS
                )
            ]
        return errs
