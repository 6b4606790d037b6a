"""PersistentVolume and PersistentVolumeClaim: validation beyond the schema, as upstream's.

Claims: at least one access mode (``ReadWriteOncePod`` alone), a positive ``storage``
request, a valid selector and class name. After creation a claim's spec is fixed, but
for what binding writes: ``volumeName`` once, ``storageClassName`` once when it was
absent (the default class given later), and a bigger request once the claim is bound.

Volumes: exactly one volume source, at least one access mode, a positive ``storage``
capacity and nothing else in it, the source's required path, node affinity on a
``local`` volume; after creation the source, the volume mode and a node affinity
once set do not change.
"""

from __future__ import annotations

import copy
from typing import Any, Mapping

from ..api import persistentvolumes as pvs
from ..api import validation as v
from ..api.helpers import dict_at
from ..api.quantity import Quantity, QuantityError
from ..api.selectors import validate_label_selector
from .strategy import Strategy

IMMUTABLE_CLAIM = "spec is immutable after creation except resources.requests for bound claims"
IMMUTABLE_SOURCE = "spec.persistentvolumesource is immutable after creation"


def _access_mode_errors(modes: Any, path: str) -> list[v.FieldError]:
    if not isinstance(modes, list) or not modes:
        return [v.FieldError.required(path, "at least 1 access mode is required")]
    if "ReadWriteOncePod" in modes and len(modes) > 1:
        return [v.FieldError.forbidden(path, "may not use ReadWriteOncePod with other access modes")]
    return []


def _positive_storage(value: Any, path: str) -> list[v.FieldError]:
    try:
        q = Quantity.parse(str(value))
    except (QuantityError, ValueError):
        return []  # the schema's quantity check reports it
    if q.sign() <= 0:
        return [v.FieldError.invalid(path, str(value), "must be greater than zero")]
    return []


def _class_name_errors(spec: Mapping, path: str) -> list[v.FieldError]:
    name = spec.get("storageClassName")
    if not name:
        return []
    return [v.FieldError.invalid(path, name, m) for m in v.is_dns1123_subdomain(str(name))]


class PersistentVolumeClaimStrategy(Strategy):
    def validate(self, obj: dict) -> list[v.FieldError]:
        errs = super().validate(obj)
        spec = dict_at(obj, "spec")
        errs += _access_mode_errors(spec.get("accessModes"), "spec.accessModes")
        requests = dict_at(dict_at(spec, "resources"), "requests")
        if requests.get("storage") in (None, ""):
            errs.append(v.FieldError.required("spec.resources[storage]"))
        else:
            errs += _positive_storage(requests["storage"], "spec.resources[storage]")
        if isinstance(spec.get("selector"), dict):
            errs += validate_label_selector(spec["selector"], "spec.selector")
        errs += _class_name_errors(spec, "spec.storageClassName")
        return errs

    def validate_update(self, new: dict, old: dict) -> list[v.FieldError]:
        errs = super().validate_update(new, old)
        new_spec, old_spec = dict_at(new, "spec"), copy.deepcopy(dict_at(old, "spec"))
        if not old_spec.get("volumeName") and "volumeName" in new_spec:
            old_spec["volumeName"] = new_spec["volumeName"]
        if old_spec.get("storageClassName") is None and "storageClassName" in new_spec:
            old_spec["storageClassName"] = new_spec["storageClassName"]
        if dict_at(old, "status").get("phase") == pvs.CLAIM_BOUND:
            new_request = pvs.storage_quantity(dict_at(dict_at(new_spec, "resources"), "requests"))
            old_request = pvs.storage_quantity(dict_at(dict_at(old_spec, "resources"), "requests"))
            if new_request is not None and old_request is not None:
                if new_request.as_fraction() < old_request.as_fraction():
                    errs.append(
                        v.FieldError.forbidden(
                            "spec.resources.requests.storage", "field can not be less than previous value"
                        )
                    )
                old_spec["resources"] = copy.deepcopy(new_spec.get("resources"))
        if new_spec != old_spec:
            changed = sorted(k for k in set(new_spec) | set(old_spec) if new_spec.get(k) != old_spec.get(k))
            errs.append(v.FieldError.forbidden("spec", f"{IMMUTABLE_CLAIM} (changed: {', '.join(changed)})"))
        return errs


class PersistentVolumeStrategy(Strategy):
    def validate(self, obj: dict) -> list[v.FieldError]:
        errs = super().validate(obj)
        spec = dict_at(obj, "spec")
        errs += _access_mode_errors(spec.get("accessModes"), "spec.accessModes")
        capacity = spec.get("capacity")
        if not isinstance(capacity, dict) or not capacity:
            errs.append(v.FieldError.required("spec.capacity"))
        else:
            for key, value in capacity.items():
                if key != "storage":
                    errs.append(v.FieldError.not_supported("spec.capacity", key, ("storage",)))
                else:
                    errs += _positive_storage(value, "spec.capacity[storage]")
        sources = pvs.volume_sources(obj)
        if not sources:
            errs.append(v.FieldError.required("spec", "must specify a volume type"))
        for extra in sources[1:]:
            errs.append(v.FieldError.forbidden(f"spec.{extra}", "may not specify more than 1 volume type"))
        for source in ("hostPath", "local"):
            if isinstance(spec.get(source), dict) and not spec[source].get("path"):
                errs.append(v.FieldError.required(f"spec.{source}.path"))
        if isinstance(spec.get("local"), dict) and not spec.get("nodeAffinity"):
            errs.append(v.FieldError.required("spec.nodeAffinity", "Local volume requires node affinity"))
        errs += _class_name_errors(spec, "spec.storageClassName")
        return errs

    def validate_update(self, new: dict, old: dict) -> list[v.FieldError]:
        errs = super().validate_update(new, old)
        new_spec, old_spec = dict_at(new, "spec"), dict_at(old, "spec")
        sources = set(pvs.volume_sources(new)) | set(pvs.volume_sources(old))
        if any(new_spec.get(k) != old_spec.get(k) for k in sources):
            errs.append(v.FieldError.forbidden("spec.persistentvolumesource", IMMUTABLE_SOURCE))
        if pvs.volume_mode(new_spec) != pvs.volume_mode(old_spec):
            errs.append(v.FieldError.invalid("spec.volumeMode", new_spec.get("volumeMode"), "field is immutable"))
        if old_spec.get("nodeAffinity") and new_spec.get("nodeAffinity") != old_spec.get("nodeAffinity"):
            errs.append(v.FieldError.invalid("spec.nodeAffinity", new_spec.get("nodeAffinity"), "field is immutable"))
        return errs
