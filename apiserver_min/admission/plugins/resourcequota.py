"""ResourceQuota: a namespaced write may not take the namespace past any of its quotas.

Validating only, as upstream. For a create (and the updates that can change usage:
services, volume claims) the plugin finds the namespace's quotas that apply to the
object, refuses it when a quota's usage is not known yet, when a pod leaves out a
resource a quota requires every container to state, or when the new usage would
pass a hard limit; otherwise it charges the object to every applying quota by
writing ``status.used`` with a compare-and-swap on the quota's resourceVersion,
reading the quotas again and re-evaluating whatever did not land when another
writer got in first. Within this server, charges of one namespace are serialized
(so concurrent creates do not keep losing the swap); between servers the swap
decides. A dry run is checked but charges nothing. The charge happens before the
object is stored: if storing then fails, the quota controller's recount gives the
charge back.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from typing import TYPE_CHECKING, Any

from ...api import names
from ...api import quota as q
from ...api import status as st
from ...api.user import SYSTEM_USER
from ...storage.keys import key_prefix
from ..chain import Attributes

if TYPE_CHECKING:
    from ...api.kinds import KindInfo, Registry
    from ...registry.store import Store
    from ...storage.cacher import WatchCache

log = logging.getLogger("orch-apiserver.admission.resourcequota")

# How often a charge is tried again after losing the compare-and-swap.
MAX_CHARGE_ATTEMPTS = 20


class ResourceQuotaAdmission:
    name = "ResourceQuota"
    resources = None  # any namespaced kind can be counted (count/<resource>.<group>)

    def __init__(self, store: "Store", cache: "WatchCache", registry: "Registry"):
        self.store = store
        self.cache = cache
        self.registry = registry
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()
        self._quota_kind: KindInfo | None = None

    @property
    def quota_kind(self) -> "KindInfo":
        if self._quota_kind is None:
            kind = self.registry.by_resource("", "v1", "resourcequotas")
            if kind is None:
                raise LookupError("no kind serves resourcequotas")
            self._quota_kind = kind
        return self._quota_kind

    async def admit(self, attrs: Attributes) -> None:
        return None

    async def validate(self, attrs: Attributes) -> None:
        k = attrs.kind
        if attrs.subresource or not attrs.namespace or not k.namespaced:
            return
        if (k.group, k.resource) in q.IGNORED_RESOURCES or not isinstance(attrs.obj, dict):
            return
        if not q.handles(k.group, k.resource, attrs.operation):
            return
        # Most namespaces have no quota limiting this kind: the watch cache says so without a
        # storage read. (A quota created a moment ago has no status.hard yet: it would not
        # charge anyway.)
        if not any(
            q.matching_resources(k.group, k.resource, _status_hard(e.object()))
            for e in self._cached_quotas(attrs.namespace)
        ):
            return
        lock = self._locks.get(attrs.namespace)
        if lock is None:
            lock = self._locks[attrs.namespace] = asyncio.Lock()
        async with lock:
            await self._charge(attrs)

    def _cached_quotas(self, namespace: str) -> list:
        return self.cache.cache(key_prefix(self.quota_kind)).sorted_entries(namespace)

    async def _quotas(self, namespace: str) -> list[dict]:
        """The namespace's quotas (which ones: the watch cache; their state: storage, as the
        compare-and-swap needs)."""
        out = []
        for entry in self._cached_quotas(namespace):
            try:
                out.append(await self.store.get_object(self.quota_kind, namespace, entry.name))
            except st.ApiError as exc:
                if exc.code != 404:
                    raise
        return out

    async def _charge(self, attrs: Attributes) -> None:
        charged: set[str] = set()
        for _ in range(MAX_CHARGE_ATTEMPTS):
            quotas = [x for x in await self._quotas(attrs.namespace) if x["metadata"]["name"] not in charged]
            if not quotas:
                return
            updates = evaluate(attrs, quotas)
            if not updates or attrs.dry_run:
                return
            for quota, used in updates:
                name = quota["metadata"]["name"]
                if await self._write_used(attrs.namespace, quota, used):
                    charged.add(name)
                else:
                    break
            else:
                return
        raise st.forbidden(
            attrs.kind.resource,
            attrs.name,
            attrs.kind.group,
            "failed to charge the namespace's quotas: too many concurrent updates; try again",
        )

    async def _write_used(self, namespace: str, quota: dict, used: q.ResourceList) -> bool:
        """Compare-and-swap the quota's status.used; False when the quota changed meanwhile."""
        md = quota["metadata"]
        rv = md["resourceVersion"]

        def compute(current: dict) -> dict:
            current["metadata"]["resourceVersion"] = rv
            status = current.setdefault("status", {})
            status["used"] = q.format_list(used)
            return current

        try:
            await self.store.update(
                self.quota_kind,
                namespace,
                md["name"],
                compute,
                SYSTEM_USER,
                subresource="status",
                field_manager=names.APISERVER_FIELD_MANAGER,
            )
        except st.ApiError as exc:
            if exc.code in (404, 409):
                return False
            raise
        return True


def evaluate(attrs: Attributes, quotas: list[dict]) -> list[tuple[dict, q.ResourceList]]:
    """The quotas the write is charged to, each with its new ``status.used``; raises
    403 Forbidden with upstream's messages when the write may not happen."""
    k = attrs.kind
    group, resource, obj = k.group, k.resource, attrs.obj or {}
    interesting: list[tuple[dict, list[str]]] = []
    for quota in quotas:
        status = quota.get("status") if isinstance(quota.get("status"), dict) else {}
        hard = q.parse_list((status or {}).get("hard"))
        if not q.matches(hard, q.quota_scope_requirements(quota), group, resource, obj):
            continue
        restricted = q.matching_resources(group, resource, hard)
        name = quota["metadata"]["name"]
        if group == "" and resource == "pods":
            problem = q.pod_constraints(restricted, obj)
            if problem:
                raise _forbidden(attrs, f"failed quota: {name}: {problem}")
        used = q.parse_list((status or {}).get("used"))
        unknown = [r for r in restricted if r not in used]
        if unknown:
            raise _forbidden(attrs, f"status unknown for quota: {name}, resources: {','.join(sorted(unknown))}")
        interesting.append((quota, restricted))
    if not interesting:
        return []
    delta = q.usage(group, resource, obj)
    bad = q.negative(delta)
    if bad:
        raise _forbidden(attrs, f"quota usage is negative for resource(s): {','.join(bad)}")
    old = attrs.old
    if attrs.operation == "UPDATE" and isinstance(old, dict) and (old.get("metadata") or {}).get("resourceVersion"):
        delta = q.subtract_non_negative(delta, q.usage(group, resource, old))
    delta = q.remove_zeros(delta)
    if not delta:
        return []
    out = []
    for quota, _restricted in interesting:
        status = quota.get("status") or {}
        hard = q.parse_list(status.get("hard"))
        used = q.parse_list(status.get("used"))
        requested = q.mask(delta, hard)
        new_used = q.add(used, requested)
        exceeded = q.less_or_equal(q.mask(new_used, requested), hard)
        if exceeded:
            raise _forbidden(
                attrs,
                f"exceeded quota: {quota['metadata']['name']}, requested: {q.pretty(q.mask(requested, exceeded))}, "
                f"used: {q.pretty(q.mask(used, exceeded))}, limited: {q.pretty(q.mask(hard, exceeded))}",
            )
        if requested:
            out.append((quota, new_used))
    return out


def _status_hard(quota: dict) -> list[str]:
    status = quota.get("status")
    hard = status.get("hard") if isinstance(status, dict) else None
    return list(hard) if isinstance(hard, dict) else []


def _forbidden(attrs: Attributes, message: str) -> st.ApiError:
    return st.forbidden(attrs.kind.resource, attrs.name, attrs.kind.group, message)


def plugin(server: Any) -> ResourceQuotaAdmission:
    return ResourceQuotaAdmission(server.store, server.cache, server.registry)
