"""Strategies of the resource policy kinds: LimitRange, ResourceQuota and
PriorityClass, with upstream's (v1.27) validation rules, messages and field paths.
What the admission plugins enforce with these objects is in ``admission/plugins``."""

from __future__ import annotations

from typing import Any

from ..api import names
from ..api import validation as v
from ..api.quantity import Quantity, QuantityError, parse_quantity
from ..api.quota import is_extended_resource
from .strategy import Strategy

Errs = list[v.FieldError]

_STANDARD_CONTAINER_RESOURCES = frozenset({"cpu", "memory", "ephemeral-storage"})
_POD_COMPUTE_QUOTA = frozenset({"cpu", "memory", "limits.cpu", "limits.memory", "requests.cpu", "requests.memory"})
_STANDARD_QUOTA_RESOURCES = frozenset(
    {
        "cpu",
        "memory",
        "ephemeral-storage",
        "requests.cpu",
        "requests.memory",
        "requests.storage",
        "requests.ephemeral-storage",
        "limits.cpu",
        "limits.memory",
        "limits.ephemeral-storage",
        "pods",
        "services",
        "replicationcontrollers",
        "resourcequotas",
        "secrets",
        "persistentvolumeclaims",
        "configmaps",
        "services.nodeports",
        "services.loadbalancers",
    }
)
_STANDARD_RESOURCES = _STANDARD_QUOTA_RESOURCES | frozenset({"storage"})
_INTEGER_RESOURCES = frozenset(
    {
        "pods",
        "services",
        "replicationcontrollers",
        "resourcequotas",
        "secrets",
        "configmaps",
        "persistentvolumeclaims",
        "services.nodeports",
        "services.loadbalancers",
    }
)
_SCOPES = ("Terminating", "NotTerminating", "BestEffort", "NotBestEffort", "PriorityClass", "CrossNamespacePodAffinity")
_EXISTS_ONLY_SCOPES = ("BestEffort", "NotBestEffort", "Terminating", "NotTerminating", "CrossNamespacePodAffinity")
_CONFLICTING_SCOPES = (("BestEffort", "NotBestEffort"), ("Terminating", "NotTerminating"))
_LIMIT_TYPES_FOR_CONTAINERS = ("Pod", "Container")


def _hugepages(name: str) -> bool:
    return name.startswith("hugepages-") or name.startswith("requests.hugepages-")


def _native(name: str) -> bool:
    return "/" not in name or names.RESOURCE_NATIVE_PREFIX in name


def _resource_name(name: str, path: str) -> Errs:
    errs = [v.FieldError.invalid(path, name, m) for m in v.is_qualified_name(name)]
    if errs:
        return errs
    if "/" not in name and name not in _STANDARD_RESOURCES and not _hugepages(name):
        return [v.FieldError.invalid(path, name, "must be a standard resource type or fully qualified")]
    return []


def _container_resource_name(name: str, path: str) -> Errs:
    errs = _resource_name(name, path)
    if errs:
        return errs
    if "/" not in name:
        if name not in _STANDARD_CONTAINER_RESOURCES and not name.startswith("hugepages-"):
            return [v.FieldError.invalid(path, name, "must be a standard resource for containers")]
    elif not _native(name) and not is_extended_resource(name):
        return [v.FieldError.invalid(path, name, "doesn't follow extended resource name standard")]
    return []


def _quota_resource_name(name: str, path: str) -> Errs:
    errs = _resource_name(name, path)
    if errs:
        return errs
    if "/" not in name and name not in _STANDARD_QUOTA_RESOURCES and not _hugepages(name):
        return [v.FieldError.invalid(path, name, "must be a standard resource for quota")]
    return []


def _quantities(obj: dict, key: str, path: str, errs: Errs) -> dict[str, Quantity]:
    raw = obj.get(key)
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        errs.append(v.FieldError.type_invalid(path, raw, "must be a map of resource quantities"))
        return {}
    out = {}
    for name, value in raw.items():
        try:
            out[str(name)] = parse_quantity(value)
        except (QuantityError, TypeError, ValueError) as exc:
            errs.append(v.FieldError.invalid(f"{path}[{name}]", value, str(exc)))
    return out


def _shown(value: Quantity) -> v.GoValue:
    """A quantity in a message: its canonical form, unquoted."""
    return v.GoValue(value.canonical())


# --- LimitRange -----------------------------------------------------------------------


def validate_limit_range_spec(obj: dict) -> Errs:
    errs: Errs = []
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return errs
    items = spec.get("limits") or []
    if not isinstance(items, list):
        return [v.FieldError.type_invalid("spec.limits", items, "must be a list")]
    seen_types: set[str] = set()
    for i, item in enumerate(items):
        p = f"spec.limits[{i}]"
        if not isinstance(item, dict):
            errs.append(v.FieldError.type_invalid(p, item, "must be an object"))
            continue
        kind = item.get("type", "")
        kind = kind if isinstance(kind, str) else str(kind)
        errs += [v.FieldError.invalid(f"{p}.type", kind, m) for m in v.is_qualified_name(kind)]
        if kind in seen_types:
            errs.append(v.FieldError.duplicate(f"{p}.type", kind))
        seen_types.add(kind)
        name_check = _container_resource_name if kind in _LIMIT_TYPES_FOR_CONTAINERS else _resource_name
        maps: dict[str, dict[str, Quantity]] = {}
        keys: dict[str, None] = {}
        for key in ("max", "min", "default", "defaultRequest", "maxLimitRequestRatio"):
            maps[key] = _quantities(item, key, f"{p}.{key}", errs)
            if kind == "Pod" and key in ("default", "defaultRequest"):
                if maps[key]:
                    errs.append(v.FieldError.forbidden(f"{p}.{key}", "may not be specified when `type` is 'Pod'"))
                maps[key] = {}
                continue
            for name in maps[key]:
                errs += name_check(name, f"{p}.{key}[{name}]")
                keys.setdefault(name, None)
        if kind == "PersistentVolumeClaim" and "storage" not in maps["min"] and "storage" not in maps["max"]:
            errs.append(
                v.FieldError.required(
                    f"{p}.limits", "either minimum or maximum storage value is required, but neither was provided"
                )
            )
        for name in keys:
            errs += _limit_item_bounds(p, name, maps)
    return errs


def _limit_item_bounds(p: str, k: str, maps: dict[str, dict[str, Quantity]]) -> Errs:
    errs: Errs = []
    lo, hi = maps["min"].get(k), maps["max"].get(k)
    default, request, ratio = maps["default"].get(k), maps["defaultRequest"].get(k), maps["maxLimitRequestRatio"].get(k)
    if lo is not None and hi is not None and lo > hi:
        errs.append(v.FieldError.invalid(f"{p}.min[{k}]", _shown(lo), f"min value {lo} is greater than max value {hi}"))
    if request is not None and lo is not None and lo > request:
        errs.append(
            v.FieldError.invalid(
                f"{p}.defaultRequest[{k}]",
                _shown(request),
                f"min value {lo} is greater than default request value {request}",
            )
        )
    if request is not None and hi is not None and request > hi:
        errs.append(
            v.FieldError.invalid(
                f"{p}.defaultRequest[{k}]",
                _shown(request),
                f"default request value {request} is greater than max value {hi}",
            )
        )
    if request is not None and default is not None and request > default:
        errs.append(
            v.FieldError.invalid(
                f"{p}.defaultRequest[{k}]",
                _shown(request),
                f"default request value {request} is greater than default limit value {default}",
            )
        )
    if default is not None and lo is not None and lo > default:
        errs.append(
            v.FieldError.invalid(
                f"{p}.default[{k}]", _shown(lo), f"min value {lo} is greater than default value {default}"
            )
        )
    if default is not None and hi is not None and default > hi:
        errs.append(
            v.FieldError.invalid(
                f"{p}.default[{k}]", _shown(hi), f"default value {default} is greater than max value {hi}"
            )
        )
    if ratio is not None and ratio < Quantity(1):
        errs.append(
            v.FieldError.invalid(f"{p}.maxLimitRequestRatio[{k}]", _shown(ratio), f"ratio {ratio} is less than 1")
        )
    if ratio is not None and lo is not None and hi is not None and not lo.is_zero():
        limit = hi.as_fraction() / lo.as_fraction()
        if ratio.as_fraction() > limit:
            errs.append(
                v.FieldError.invalid(
                    f"{p}.maxLimitRequestRatio[{k}]",
                    _shown(ratio),
                    f"ratio {ratio} is greater than max/min = {float(limit):f}",
                )
            )
    overcommit = _native(k) and not k.startswith("hugepages-")
    if not overcommit and default is not None and request is not None and default != request:
        errs.append(
            v.FieldError.invalid(
                f"{p}.defaultRequest[{k}]",
                _shown(request),
                f"default value {default} must equal to defaultRequest value {request} in {k}",
            )
        )
    return errs


class LimitRangeStrategy(Strategy):
    def validate(self, obj: dict) -> Errs:
        return super().validate(obj) + validate_limit_range_spec(obj)


# --- ResourceQuota --------------------------------------------------------------------


def _scope_valid_for(scope: str, resource: str) -> bool:
    if scope == "BestEffort":
        return resource == "pods"
    if scope in ("Terminating", "NotTerminating", "NotBestEffort", "PriorityClass", "CrossNamespacePodAffinity"):
        return resource == "pods" or resource in _POD_COMPUTE_QUOTA
    return True


def _go_scopes(scopes: list) -> v.GoValue:
    return v.GoValue("[]core.ResourceQuotaScope{" + ", ".join(v.go_quote(str(s)) for s in scopes) + "}")


def _go_selector(selector: dict) -> v.GoValue:
    parts = []
    for req in selector.get("matchExpressions") or []:
        if not isinstance(req, dict):
            continue
        values = ", ".join(v.go_quote(str(x)) for x in req.get("values") or [])
        parts.append(
            f"core.ScopedResourceSelectorRequirement{{ScopeName:{v.go_quote(str(req.get('scopeName', '')))}, "
            f"Operator:{v.go_quote(str(req.get('operator', '')))}, Values:[]string{{{values}}}}}"
        )
    return v.GoValue(
        "&core.ScopeSelector{MatchExpressions:[]core.ScopedResourceSelectorRequirement{" + ", ".join(parts) + "}}"
    )


def _resource_list(obj: dict, key: str, path: str) -> Errs:
    errs: Errs = []
    for name, q in _quantities(obj, key, path, errs).items():
        p = f"{path}[{name}]"
        errs += _quota_resource_name(name, p)
        if q.sign() < 0:
            errs.append(v.FieldError.invalid(p, str(q), "must be greater than or equal to 0"))
        if (name in _INTEGER_RESOURCES or is_extended_resource(name)) and q.milli_value() % 1000:
            errs.append(v.FieldError.invalid(p, str(q), "must be an integer"))
    return errs


def validate_resource_quota(obj: dict) -> Errs:
    errs: Errs = []
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    assert isinstance(spec, dict)
    errs += _resource_list(spec, "hard", "spec.hard")
    hard = sorted(spec.get("hard") or {}) if isinstance(spec.get("hard"), dict) else []
    scopes = spec.get("scopes") or []
    if isinstance(scopes, list) and scopes:
        seen = set()
        for scope in scopes:
            # An unknown scope is reported by the enumerated-field check.
            for k in hard:
                if k in _STANDARD_QUOTA_RESOURCES and scope in _SCOPES and not _scope_valid_for(scope, k):
                    errs.append(
                        v.FieldError.invalid("spec.scopes", _go_scopes(scopes), "unsupported scope applied to resource")
                    )
            seen.add(scope)
        for pair in _CONFLICTING_SCOPES:
            if set(pair) <= seen:
                errs.append(v.FieldError.invalid("spec.scopes", _go_scopes(scopes), "conflicting scopes"))
    selector = spec.get("scopeSelector")
    if isinstance(selector, dict):
        errs += _scope_selector(selector, hard)
    status = obj.get("status")
    if isinstance(status, dict):
        errs += _resource_list(status, "hard", "status.hard")
        errs += _resource_list(status, "used", "status.used")
    return errs


def _scope_selector(selector: dict, hard: list[str]) -> Errs:
    errs: Errs = []
    p = "spec.scopeSelector.matchExpressions"
    seen = set()
    for req in selector.get("matchExpressions") or []:
        if not isinstance(req, dict):
            continue
        scope, op, values = req.get("scopeName"), req.get("operator"), req.get("values") or []
        if scope not in _SCOPES:
            errs.append(v.FieldError.invalid(f"{p}.scopeName", scope, "unsupported scope"))
        for k in hard:
            if k in _STANDARD_QUOTA_RESOURCES and isinstance(scope, str) and not _scope_valid_for(scope, k):
                errs.append(v.FieldError.invalid(p, _go_selector(selector), "unsupported scope applied to resource"))
        if scope in _EXISTS_ONLY_SCOPES and op != "Exists":
            errs.append(
                v.FieldError.invalid(
                    f"{p}.operator",
                    op,
                    "must be 'Exist' when scope is any of ResourceQuotaScopeTerminating, "
                    "ResourceQuotaScopeNotTerminating, ResourceQuotaScopeBestEffort, "
                    "ResourceQuotaScopeNotBestEffort or ResourceQuotaScopeCrossNamespacePodAffinity",
                )
            )
        if op in ("In", "NotIn"):
            if not values:
                errs.append(
                    v.FieldError.required(
                        f"{p}.values",
                        "must be at least one value when `operator` is 'In' or 'NotIn' for scope selector",
                    )
                )
        elif op in ("Exists", "DoesNotExist"):
            if values:
                errs.append(
                    v.FieldError.invalid(
                        f"{p}.values",
                        v.GoValue("[]string{" + ", ".join(v.go_quote(str(x)) for x in values) + "}"),
                        "must be no value when `operator` is 'Exist' or 'DoesNotExist' for scope selector",
                    )
                )
        else:
            errs.append(v.FieldError.invalid(f"{p}.operator", op, "not a valid selector operator"))
        seen.add(scope)
    for pair in _CONFLICTING_SCOPES:
        if set(pair) <= seen:
            errs.append(v.FieldError.invalid(p, _go_selector(selector), "conflicting scopes"))
    return errs


class ResourceQuotaStrategy(Strategy):
    def validate(self, obj: dict) -> Errs:
        return super().validate(obj) + validate_resource_quota(obj)

    def validate_update(self, new: dict, old: dict) -> Errs:
        errs = super().validate_update(new, old)
        new_scopes = (new.get("spec") or {}).get("scopes") or []
        old_scopes = (old.get("spec") or {}).get("scopes") or []
        if (
            isinstance(new_scopes, list)
            and isinstance(old_scopes, list)
            and set(map(str, new_scopes)) != set(map(str, old_scopes))
        ):
            errs.append(v.FieldError.invalid("spec.scopes", _go_scopes(new_scopes), "field is immutable"))
        return errs


# --- PriorityClass --------------------------------------------------------------------


def _known_system_class(name: str, value: Any, global_default: bool) -> str | None:
    expected = names.SYSTEM_PRIORITY_CLASSES.get(name)
    if expected is None:
        return f"{name} is not a known system priority class"
    if value != expected:
        return f"value of {name} PriorityClass must be {expected}"
    if global_default:
        return f"globalDefault of {name} PriorityClass must be false"
    return None


class PriorityClassStrategy(Strategy):
    def validate(self, obj: dict) -> Errs:
        errs = super().validate(obj)
        name = str((obj.get("metadata") or {}).get("name") or "")
        value = obj.get("value")
        if name.startswith(names.SYSTEM_PRIORITY_CLASS_PREFIX):
            problem = _known_system_class(name, value, obj.get("globalDefault") is True)
            if problem:
                errs.append(
                    v.FieldError.forbidden(
                        "metadata.name",
                        f"priority class names with '{names.SYSTEM_PRIORITY_CLASS_PREFIX}' prefix are reserved "
                        f"for system use only. error: {problem}",
                    )
                )
        elif isinstance(value, int) and value > names.HIGHEST_USER_DEFINABLE_PRIORITY:
            errs.append(
                v.FieldError.forbidden(
                    "value",
                    f"maximum allowed value of a user defined priority is {names.HIGHEST_USER_DEFINABLE_PRIORITY}",
                )
            )
        return errs

    def validate_update(self, new: dict, old: dict) -> Errs:
        errs = super().validate_update(new, old)
        if new.get("value") != old.get("value"):
            errs.append(v.FieldError.forbidden("value", "may not be changed in an update."))
        if new.get("preemptionPolicy") != old.get("preemptionPolicy"):
            errs.append(v.FieldError.invalid("preemptionPolicy", new.get("preemptionPolicy"), "field is immutable"))
        return errs
