"""Local ephemeral storage limits (``--local-storage-capacity-isolation``, on by default).

Each round, before the node thresholds, a pod is evicted when (upstream's order):

* an emptyDir volume uses more than its ``sizeLimit``;
* the pod's ephemeral storage (writable layers, logs, local volumes) exceeds the
  sum of its containers' ``ephemeral-storage`` limits;
* a container's logs (and writable layer, when images and the node share a file
  system) exceed its own ``ephemeral-storage`` limit.

Only pods that declare such a limit are looked at, so a node without them pays
nothing for this check.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

from apiserver_min.api.quantity import Format, Quantity, QuantityError, parse_quantity

from .. import pods as podutil
from ..cm.qos import pod_limits

__all__ = ["has_storage_limits", "storage_limit_violation"]

PodStats = Mapping[str, Any]


def _quantity(raw: Any) -> tuple[int, str] | None:
    if raw is None:
        return None
    try:
        q = parse_quantity(raw)
    except QuantityError:
        return None
    return q.value(), q.canonical()


def _container_limit(c: Mapping) -> tuple[int, str] | None:
    q = _quantity(((c.get("resources") or {}).get("limits") or {}).get("ephemeral-storage"))
    return q if q is not None and q[0] != 0 else None


def _size_limits(pod: dict) -> dict[str, tuple[int, str]]:
    out = {}
    for v in podutil.spec(pod).get("volumes") or []:
        empty = v.get("emptyDir")
        if isinstance(empty, Mapping):
            q = _quantity(empty.get("sizeLimit"))
            if q is not None and q[0] > 0:
                out[v.get("name", "")] = q
    return out


def has_storage_limits(pod: dict) -> bool:
    if _size_limits(pod):
        return True
    return any(_container_limit(c) for c in podutil.containers(pod) + podutil.init_containers(pod))


def _go_quote(text: str) -> str:
    return json.dumps(text)  # Go's %q for the plain names and quantities shown here


def storage_limit_violation(pod: dict, stats: PodStats | None, dedicated_image_fs: bool) -> str:
    """Upstream's message for the first limit ``pod`` exceeds, or "" when none."""
    if stats is None:
        return ""
    used = {v.get("name"): int(v.get("usedBytes") or 0) for v in stats.get("volume") or []}
    for name, (size, text) in _size_limits(pod).items():
        if name in used and used[name] > size:
            return f"Usage of EmptyDir volume {_go_quote(name)} exceeds the limit {_go_quote(text)}. "
    limits = pod_limits(pod).limits
    if "ephemeral-storage" in limits:
        total = int((stats.get("ephemeral-storage") or {}).get("usedBytes") or 0)
        if total > limits["ephemeral-storage"]:
            return (
                "Pod ephemeral local storage usage exceeds the total limit of containers "
                f"{_limit_text(pod, limits['ephemeral-storage'])}. "
            )
    specs = {c.get("name"): c for c in podutil.containers(pod)}
    for cs in stats.get("containers") or []:
        spec = specs.get(cs.get("name"))
        limit = _container_limit(spec) if spec is not None else None
        if limit is None:
            continue
        usage = int((cs.get("logs") or {}).get("usedBytes") or 0)
        if not dedicated_image_fs:
            usage += int((cs.get("rootfs") or {}).get("usedBytes") or 0)
        if usage > limit[0]:
            return f"Container {cs.get('name')} exceeded its local ephemeral storage limit {_go_quote(limit[1])}. "
    return ""


def _limit_text(pod: dict, total: int) -> str:
    """A summed limit as upstream prints it: in the format of the first container's limit."""
    fmt = Format.BINARY_SI
    for c in podutil.containers(pod) + podutil.init_containers(pod):
        raw = ((c.get("resources") or {}).get("limits") or {}).get("ephemeral-storage")
        if raw is not None:
            try:
                fmt = parse_quantity(raw).format
            except QuantityError:
                continue
            break
    return Quantity(total, fmt).canonical()
