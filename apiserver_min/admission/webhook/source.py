"""The current webhook configurations, namespaces and service endpoints, read from
the watch cache as informers read it.

The list of webhooks is rebuilt on the first request after a configuration changed
(the cache's fan-out marks it stale), so a change takes effect as soon as the
watch cache has it: no polling. A webhook's ``matchConditions`` are compiled once
per configuration generation."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Callable

from ...api import names
from ...api.selectors import LabelSelector
from ...cel import environments
from ...storage.keys import key_prefix
from ...webhookclient.lookup import ClusterLookup as ClusterLookup
from ...webhookclient.lookup import ResolveError as ResolveError
from ..equivalence import Equivalence, Equivalent
from ..matchconditions import MatchConditions
from .matching import parse_selector, rule_matches, rules_match_shape

if TYPE_CHECKING:
    from ...api.kinds import KindInfo, Registry
    from ...storage.cacher import CacheEvent, ResourceCache, WatchCache


@dataclasses.dataclass(frozen=True)
class Webhook:
    """One webhook of one configuration, with its selectors parsed."""

    configuration: str
    index: int  # its place in the configuration's list
    spec: dict
    namespace_selector: LabelSelector
    object_selector: LabelSelector
    client_key: str  # what its connection depends on (configuration uid, name, clientConfig)
    # Its ``matchConditions``, compiled (from the spec when not given).
    conditions: MatchConditions | None = None

    def __post_init__(self) -> None:
        if self.conditions is None:
            object.__setattr__(self, "conditions", compile_conditions(self.spec))

    @property
    def name(self) -> str:
        return str(self.spec.get("name") or "")


def compile_conditions(spec: dict) -> MatchConditions:
    """A webhook's ``matchConditions``, compiled for its environment."""
    return MatchConditions(spec.get("matchConditions"), environments.webhook_match_compiler())


def _served(registry: "Registry", group: str, resource: str) -> "KindInfo":
    kind = registry.by_resource(group, "v1", resource)
    if kind is None:
        raise LookupError(f"no kind serves {group or 'core'}/v1 {resource}")
    return kind


class WebhookSource:
    """One configuration kind's webhooks (configurations sorted by name, webhooks in
    list order), kept current from the watch cache."""

    def __init__(
        self, cache: "WatchCache", registry: "Registry", resource: str, equivalence: Equivalence | None = None
    ):
        self.kind = _served(registry, names.ADMISSIONREGISTRATION_GROUP, resource)
        self._watch_cache = cache
        self._cache: ResourceCache | None = None  # subscribed on first use
        self._hooks: list[Webhook] | None = None
        # ``matchPolicy: Equivalent``: what else a request's resource is served as (None:
        # every webhook matches exactly).
        self.equivalence = equivalence
        # The webhooks whose rules match, by (operation, group, version, resource,
        # sub-resource, namespaced), each with the equivalent resource its rules named
        # (None: the request's own): rules depend on nothing else, so this is worked
        # out once per request shape, configuration and set of served kinds.
        self._by_shape: dict[tuple, list[tuple[Webhook, Equivalent | None]]] = {}
        self._registry_changes = 0
        # Compiled match conditions by (configuration uid, generation, webhook index).
        self._conditions: dict[tuple[str, Any, int], MatchConditions] = {}
        self.on_change: list[Callable[[], None]] = []

    def _on_cache_event(self, cache: "ResourceCache | None", ev: "CacheEvent | None") -> None:
        if cache is None or cache is self._cache:
            self._hooks = None
            self._by_shape = {}
            for fn in self.on_change:
                fn()

    def hooks(self) -> list[Webhook]:
        if self._cache is None:
            self._cache = self._watch_cache.cache(key_prefix(self.kind))
            self._watch_cache.listeners.append(self._on_cache_event)
        if self._hooks is None:
            self._hooks = self._build()
        return self._hooks

    def matching_rules(self, shape: tuple) -> list[tuple[Webhook, Equivalent | None]]:
        """The webhooks whose rules match requests of SHAPE (see ``_by_shape``), each
        with the equivalent resource it matched them as (None: as they are)."""
        eq = self.equivalence
        if eq is not None and eq.changes != self._registry_changes:
            self._by_shape = {}
            self._registry_changes = eq.changes
        found = self._by_shape.get(shape)
        if found is None:
            found = []
            for h in self.hooks():
                if rules_match_shape(h.spec, *shape):
                    found.append((h, None))
                elif eq is not None and h.spec.get("matchPolicy") == "Equivalent":
                    target = self._equivalent_match(eq, h.spec, shape)
                    if target is not None:
                        found.append((h, target))
            self._by_shape[shape] = found
        return found

    @staticmethod
    def _equivalent_match(eq: Equivalence, spec: dict, shape: tuple) -> Equivalent | None:
        """The first equivalent resource a rule names (rules in order, then equivalents in
        order, as upstream)."""
        op, group, version, resource, sub, namespaced = shape
        rules = spec.get("rules")
        equivalents = eq.of(group, version, resource, sub)
        if not equivalents or not isinstance(rules, list):
            return None
        for rule in rules:
            if not isinstance(rule, dict):
                continue
            for e in equivalents:
                if rule_matches(rule, op, e.group, e.version, e.resource, sub, namespaced):
                    return e
        return None

    def _build(self) -> list[Webhook]:
        found: list[Webhook] = []
        compiled: dict[tuple[str, Any, int], MatchConditions] = {}
        assert self._cache is not None
        for entry in sorted(self._cache.items.values(), key=lambda e: e.name):
            obj = entry.object()
            md = obj.get("metadata") or {}
            uid = str(md.get("uid") or "")
            hooks = obj.get("webhooks")
            for i, spec in enumerate(hooks if isinstance(hooks, list) else []):
                if not isinstance(spec, dict):
                    continue
                key = f"{uid}/{spec.get('name')}/{spec.get('clientConfig')!r}"
                generation = (uid, md.get("generation"), i)
                conditions = self._conditions.get(generation) if md.get("generation") is not None else None
                if conditions is None:
                    conditions = compile_conditions(spec)
                compiled[generation] = conditions
                found.append(
                    Webhook(
                        entry.name,
                        i,
                        spec,
                        parse_selector(spec.get("namespaceSelector")),
                        parse_selector(spec.get("objectSelector")),
                        key,
                        conditions,
                    )
                )
        self._conditions = compiled
        return found
