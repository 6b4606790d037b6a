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

Its configuration (``ResourceQuotaConfiguration``, ``apiserver.config.orch.io/v1``, in
the admission configuration file) may list ``limitedResources``: a resource whose
consumption needs a covering quota. An object of ``apiGroup``/``resource`` whose usage
names a resource containing one of ``matchContains`` (``requests.cpu`` for ``cpu``)
is refused unless a quota of the namespace that applies to it lists that resource
(``insufficient quota to consume: ...``); a pod that matches one of ``matchScopes``
needs a quota of the namespace whose scopes select it by that scope name
(``insufficient quota to match these scopes: ...``, which upstream answers as a plain
500 error, not a Forbidden).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import weakref
from typing import TYPE_CHECKING, Any, Iterable

from ...api import names
from ...api import quota as q
from ...api import status as st
from ...api.user import SYSTEM_USER
from ...storage.keys import key_prefix
from ..chain import Attributes
from ..config import strict_fields

if TYPE_CHECKING:
    from ...api.kinds import KindInfo, Registry
    from ...registry.store import Store
    from ...storage.cacher import WatchCache

log = logging.getLogger("orch-apiserver.admission.resourcequota")

# How often a charge is tried again after losing the compare-and-swap.
MAX_CHARGE_ATTEMPTS = 20

CONFIG_KIND = "ResourceQuotaConfiguration"
# The configuration's group versions: upstream's apiserver.config.k8s.io/v1 and the older
# resourcequota.admission.k8s.io/v1beta1, in the project's spelling (the same shape).
CONFIG_API_VERSIONS = (f"{names.APISERVER_CONFIG_GROUP}/v1", f"{names.RESOURCE_QUOTA_CONFIG_GROUP}/v1beta1")
SCOPE_NAMES = (
    q.SCOPE_TERMINATING,
    q.SCOPE_NOT_TERMINATING,
    q.SCOPE_BEST_EFFORT,
    q.SCOPE_NOT_BEST_EFFORT,
    q.SCOPE_PRIORITY_CLASS,
    q.SCOPE_CROSS_NAMESPACE_POD_AFFINITY,
)
SCOPE_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


@dataclasses.dataclass(frozen=True)
class LimitedResource:
    """A resource whose consumption needs a covering quota (``limitedResources[i]``)."""

    api_group: str
    resource: str
    match_contains: tuple[str, ...] = ()
    match_scopes: tuple[dict, ...] = ()


@dataclasses.dataclass(frozen=True)
class QuotaConfiguration:
    limited: tuple[LimitedResource, ...] = ()

    def applies(self, group: str, resource: str) -> bool:
        """Whether a request for GROUP/RESOURCE may need a covering quota."""
        return any(
            (x.api_group, x.resource) == (group, resource) or (x.match_scopes and (group, resource) == ("", "pods"))
            for x in self.limited
        )

    def limited_names(self, group: str, resource: str, usage: q.ResourceList) -> set[str]:
        """The resources of USAGE (the object's own, those it consumes) that need a
        covering quota: those containing one of a ``matchContains`` of the entries for
        GROUP/RESOURCE."""
        out: set[str] = set()
        for x in self.limited:
            if (x.api_group, x.resource) != (group, resource):
                continue
            for name, value in usage.items():
                if value.sign() > 0 and any(part in name for part in x.match_contains):
                    out.add(name)
        return out

    def limited_scopes(self, group: str, resource: str, obj: dict) -> list[dict]:
        """The ``matchScopes`` (of every entry, as upstream) the object matches; only pods
        have scopes."""
        if (group, resource) != ("", "pods"):
            return []
        return [s for x in self.limited for s in x.match_scopes if q.pod_matches_scope(s, obj)]


def parse_configuration(doc: dict | None) -> QuotaConfiguration:
    """The plugin's configuration (none: no limited resources); ValueError naming the
    field when it is unusable."""
    if doc is None:
        return QuotaConfiguration()
    if doc.get("kind") != CONFIG_KIND or doc.get("apiVersion") not in CONFIG_API_VERSIONS:
        raise ValueError(
            f"expected kind {CONFIG_KIND} with apiVersion {' or '.join(CONFIG_API_VERSIONS)}, "
            f"got kind {doc.get('kind')!r}, apiVersion {doc.get('apiVersion')!r}"
        )
    strict_fields(doc, ("apiVersion", "kind", "limitedResources"), "ResourceQuota configuration")
    entries = doc.get("limitedResources") or []
    if not isinstance(entries, list):
        raise ValueError("limitedResources: must be a list")
    limited = []
    for i, entry in enumerate(entries):
        path = f"limitedResources[{i}]"
        if not isinstance(entry, dict):
            raise ValueError(f"{path}: must be an object")
        strict_fields(
            entry, ("apiGroup", "resource", "matchContains", "matchScopes"), f"ResourceQuota configuration {path}"
        )
        group, resource = entry.get("apiGroup") or "", entry.get("resource")
        if not isinstance(resource, str) or not resource:
            raise ValueError(f"{path}.resource: Required value")
        if not isinstance(group, str):
            raise ValueError(f"{path}.apiGroup: must be a string")
        contains = entry.get("matchContains") or []
        if not isinstance(contains, list) or not all(isinstance(c, str) for c in contains):
            raise ValueError(f"{path}.matchContains: must be a list of strings")
        scopes = entry.get("matchScopes") or []
        if not isinstance(scopes, list):
            raise ValueError(f"{path}.matchScopes: must be a list")
        for j, scope in enumerate(scopes):
            _check_scope(scope, f"{path}.matchScopes[{j}]")
        limited.append(LimitedResource(group, resource, tuple(contains), tuple(scopes)))
    return QuotaConfiguration(tuple(limited))


def _check_scope(scope: Any, path: str) -> None:
    if not isinstance(scope, dict):
        raise ValueError(f"{path}: must be an object")
    strict_fields(scope, ("scopeName", "operator", "values"), f"ResourceQuota configuration {path}")
    if scope.get("scopeName") not in SCOPE_NAMES:
        raise ValueError(
            f"{path}.scopeName: Unsupported value: {scope.get('scopeName')!r}: supported values: {', '.join(SCOPE_NAMES)}"
        )
    op, values = scope.get("operator"), scope.get("values") or []
    if op not in SCOPE_OPERATORS:
        raise ValueError(f"{path}.operator: Unsupported value: {op!r}: supported values: {', '.join(SCOPE_OPERATORS)}")
    if not isinstance(values, list) or not all(isinstance(x, str) for x in values):
        raise ValueError(f"{path}.values: must be a list of strings")
    if op in ("In", "NotIn") and not values:
        raise ValueError(
            f"{path}.values: Required value: must be at least one value when `operator` is 'In' or 'NotIn'"
        )
    if op in ("Exists", "DoesNotExist") and values:
        raise ValueError(f"{path}.values: must be no value when `operator` is 'Exists' or 'DoesNotExist'")


def _go_scopes(scopes: Iterable[dict]) -> str:
    """Scope requirements as upstream's error prints them (Go's %v of the structs)."""
    return (
        "["
        + " ".join(f"{{{s.get('scopeName')} {s.get('operator')} [{' '.join(s.get('values') or [])}]}}" for s in scopes)
        + "]"
    )


class ResourceQuotaAdmission:
    name = "ResourceQuota"
    resources = None  # any namespaced kind can be counted (count/<resource>.<group>)

    def __init__(
        self, store: "Store", cache: "WatchCache", registry: "Registry", config: QuotaConfiguration | None = None
    ):
        self.store = store
        self.cache = cache
        self.registry = registry
        self.config = config or QuotaConfiguration()
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
        cached = self._cached_quotas(attrs.namespace)
        if not any(q.matching_resources(k.group, k.resource, _status_hard(e.object())) for e in cached):
            if self.config.applies(k.group, k.resource):
                # Nothing to charge, but a limited resource needs a covering quota.
                evaluate(attrs, [e.object() for e in cached], self.config)
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
            updates = evaluate(attrs, quotas, self.config)
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


def evaluate(
    attrs: Attributes, quotas: list[dict], config: QuotaConfiguration | None = None
) -> list[tuple[dict, q.ResourceList]]:
    """The quotas the write is charged to, each with its new ``status.used``; raises
    403 Forbidden with upstream's messages when the write may not happen (and upstream's
    plain 500 for a limited scope no quota covers)."""
    k = attrs.kind
    group, resource, obj = k.group, k.resource, attrs.obj or {}
    config = config or QuotaConfiguration()
    limited_names = config.limited_names(group, resource, q.usage(group, resource, obj)) if config.limited else set()
    limited_scopes = config.limited_scopes(group, resource, obj) if config.limited else []
    interesting: list[tuple[dict, list[str]]] = []
    covered: set[str] = set()  # what the quotas that apply to the object list
    scoped: set[str] = set()  # the scope names of the quotas' scopes the object matches
    for quota in quotas:
        status = quota.get("status") if isinstance(quota.get("status"), dict) else {}
        hard = q.parse_list((status or {}).get("hard"))
        scopes = q.quota_scope_requirements(quota)
        if limited_scopes:
            scoped.update(str(s.get("scopeName")) for s in scopes if q.pod_matches_scope(s, obj))
        if not q.matches(hard, scopes, group, resource, obj):
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
        covered.update(restricted)
    uncovered = sorted(limited_names - covered)
    if uncovered:
        raise _forbidden(attrs, f"insufficient quota to consume: {','.join(uncovered)}")
    unmatched = [s for s in limited_scopes if s.get("scopeName") not in scoped]
    if unmatched:
        raise st.ApiError(500, "", f"insufficient quota to match these scopes: {_go_scopes(unmatched)}")
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


def plugin(server: Any, config: dict | None = None) -> ResourceQuotaAdmission:
    """The plugin with its part of the admission configuration (ValueError when unusable)."""
    return ResourceQuotaAdmission(server.store, server.cache, server.registry, parse_configuration(config))
