"""LimitRange arithmetic: the defaults a LimitRange gives containers and the
min/max/ratio checks of containers, pods and volume claims, with upstream's
(v1.27) messages. The LimitRanger admission plugin applies them."""

from __future__ import annotations

from typing import Any, Mapping

from . import names
from .quantity import Quantity
from .quota import ResourceList, parse_list, pod_requests_limits

LIMIT_TYPE_CONTAINER = "Container"
LIMIT_TYPE_POD = "Pod"
LIMIT_TYPE_PVC = "PersistentVolumeClaim"

ANNOTATION_LIMIT_RANGER = f"{names.DOMAIN}/limit-ranger"


def _dict(obj: Any, key: str) -> dict:
    v = obj.get(key) if isinstance(obj, Mapping) else None
    return v if isinstance(v, dict) else {}


def _items(limit_range: Mapping) -> list[dict]:
    return [i for i in _dict(limit_range, "spec").get("limits") or [] if isinstance(i, dict)]


def container_defaults(limit_range: Mapping) -> tuple[dict, dict]:
    """(default requests, default limits) of the Container items, as raw values."""
    requests: dict = {}
    limits: dict = {}
    for item in _items(limit_range):
        if item.get("type") != LIMIT_TYPE_CONTAINER:
            continue
        limits.update(_dict(item, "default"))
        requests.update(_dict(item, "defaultRequest"))
    return requests, limits


def _merge_container(container: dict, requests: dict, limits: dict, what: str, notes: list[str]) -> None:
    res = container.get("resources")
    if not isinstance(res, dict):
        res = {}
    set_requests: list[str] = []
    set_limits: list[str] = []
    for key, defaults, changed in (("limits", limits, set_limits), ("requests", requests, set_requests)):
        current = res.get(key)
        current = dict(current) if isinstance(current, dict) else {}
        for name, value in defaults.items():
            if name not in current:
                current[name] = value
                changed.append(name)
        if changed:
            res[key] = current
    if set_requests or set_limits:
        container["resources"] = res
    cname = container.get("name", "")
    if set_requests:
        notes.append(f"{', '.join(sorted(set_requests))} request for {what} {cname}")
    if set_limits:
        notes.append(f"{', '.join(sorted(set_limits))} limit for {what} {cname}")


def apply_defaults(limit_range: Mapping, pod: dict) -> bool:
    """Fill the LimitRange's default requests and limits into the pod's (init)
    containers that lack them; note what was set in the limit-ranger annotation.
    True when anything changed."""
    requests, limits = container_defaults(limit_range)
    if not requests and not limits:
        return False
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return False
    notes: list[str] = []
    for key, what in (("containers", "container"), ("initContainers", "init container")):
        for c in spec.get(key) or []:
            if isinstance(c, dict):
                _merge_container(c, requests, limits, what, notes)
    if not notes:
        return False
    md = pod.setdefault("metadata", {})
    annotations = md.get("annotations")
    if not isinstance(annotations, dict):
        annotations = md["annotations"] = {}
    annotations[ANNOTATION_LIMIT_RANGER] = "LimitRanger plugin set: " + "; ".join(notes)
    return True


# --- checks ---------------------------------------------------------------------------


def _min(limit_type: str, name: str, enforced: Quantity, requests: ResourceList, limits: ResourceList) -> str | None:
    req, lim = requests.get(name), limits.get(name)
    if req is None:
        return f"minimum {name} usage per {limit_type} is {enforced}.  No request is specified"
    if req < enforced:
        return f"minimum {name} usage per {limit_type} is {enforced}, but request is {req}"
    if lim is not None and lim < enforced:
        return f"minimum {name} usage per {limit_type} is {enforced}, but limit is {lim}"
    return None


def _max(limit_type: str, name: str, enforced: Quantity, requests: ResourceList, limits: ResourceList) -> str | None:
    req, lim = requests.get(name), limits.get(name)
    if lim is None:
        return f"maximum {name} usage per {limit_type} is {enforced}.  No limit is specified"
    if lim > enforced:
        return f"maximum {name} usage per {limit_type} is {enforced}, but limit is {lim}"
    if req is not None and req > enforced:
        return f"maximum {name} usage per {limit_type} is {enforced}, but request is {req}"
    return None


def _max_request(limit_type: str, name: str, enforced: Quantity, requests: ResourceList) -> str | None:
    req = requests.get(name)
    if req is None:
        return f"maximum {name} usage per {limit_type} is {enforced}.  No request is specified"
    if req > enforced:
        return f"maximum {name} usage per {limit_type} is {enforced}, but request is {req}"
    return None


def _ratio(limit_type: str, name: str, enforced: Quantity, requests: ResourceList, limits: ResourceList) -> str | None:
    req, lim = requests.get(name), limits.get(name)
    if req is None or req.is_zero():
        return (
            f"{name} max limit to request ratio per {limit_type} is {enforced}, "
            "but no request is specified or request is 0"
        )
    if lim is None or lim.is_zero():
        return (
            f"{name} max limit to request ratio per {limit_type} is {enforced}, but no limit is specified or limit is 0"
        )
    observed = lim.as_fraction() / req.as_fraction()
    if observed > enforced.as_fraction():
        return (
            f"{name} max limit to request ratio per {limit_type} is {enforced}, "
            f"but provided ratio is {float(observed):f}"
        )
    return None


def _check(item: Mapping, limit_type: str, requests: ResourceList, limits: ResourceList, errs: list[str]) -> None:
    for name, q in parse_list(item.get("min")).items():
        e = _min(limit_type, name, q, requests, limits)
        if e:
            errs.append(e)
    for name, q in parse_list(item.get("max")).items():
        e = _max(limit_type, name, q, requests, limits)
        if e:
            errs.append(e)
    for name, q in parse_list(item.get("maxLimitRequestRatio")).items():
        e = _ratio(limit_type, name, q, requests, limits)
        if e:
            errs.append(e)


def pod_violations(limit_range: Mapping, pod: Mapping) -> list[str]:
    """Each container's and the pod's breaches of the LimitRange, in item order."""
    errs: list[str] = []
    spec = _dict(pod, "spec")
    for item in _items(limit_range):
        kind = item.get("type")
        if kind == LIMIT_TYPE_CONTAINER:
            for key in ("containers", "initContainers"):
                for c in spec.get(key) or []:
                    if not isinstance(c, dict):
                        continue
                    res = _dict(c, "resources")
                    _check(item, kind, parse_list(res.get("requests")), parse_list(res.get("limits")), errs)
        elif kind == LIMIT_TYPE_POD:
            requests, limits = pod_requests_limits(pod)
            _check(item, kind, requests, limits, errs)
    return errs


def pvc_violations(limit_range: Mapping, pvc: Mapping) -> list[str]:
    """A claim's breaches: its requested storage against min and max."""
    errs: list[str] = []
    requests = parse_list(_dict(_dict(pvc, "spec"), "resources").get("requests"))
    for item in _items(limit_range):
        if item.get("type") != LIMIT_TYPE_PVC:
            continue
        for name, q in parse_list(item.get("min")).items():
            e = _min(LIMIT_TYPE_PVC, name, q, requests, {})
            if e:
                errs.append(e)
        for name, q in parse_list(item.get("max")).items():
            e = _max_request(LIMIT_TYPE_PVC, name, q, requests)
            if e:
                errs.append(e)
    return errs


def aggregate(errs: list[str]) -> str:
    """Upstream's error aggregate: one message as it is, several in brackets (duplicates once)."""
    unique = list(dict.fromkeys(errs))
    return unique[0] if len(unique) == 1 else "[" + ", ".join(unique) + "]"
