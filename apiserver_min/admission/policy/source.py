"""The policies and bindings in force, read from the watch cache on each request (a
write is seen as soon as the cache has it, well within a second), with each policy
compiled once per generation."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...api import names
from ...storage.keys import key_prefix, object_key
from .matching import Matcher
from .validator import CompiledPolicy

if TYPE_CHECKING:
    from ...api.kinds import KindInfo, Registry
    from ...storage.cacher import WatchCache


class PolicySource:
    def __init__(self, cache: "WatchCache", registry: "Registry"):
        self.cache = cache
        self.registry = registry
        group = names.ADMISSIONREGISTRATION_GROUP
        policy_kind = registry.by_resource(group, "v1", "validatingadmissionpolicies")
        binding_kind = registry.by_resource(group, "v1", "validatingadmissionpolicybindings")
        namespace_kind = registry.by_resource("", "v1", "namespaces")
        if policy_kind is None or binding_kind is None or namespace_kind is None:
            raise LookupError("the validating admission policy kinds are not served")
        self.policy_kind = policy_kind
        self.policy_prefix = key_prefix(policy_kind)
        self.binding_prefix = key_prefix(binding_kind)
        self.namespace_kind = namespace_kind
        # key -> (resourceVersion, parsed object and its matchResources / compiled policy)
        self._bindings: dict[str, tuple[int, dict, Matcher]] = {}
        self._policies: dict[str, tuple[int, CompiledPolicy]] = {}
        self._compiled: dict[tuple[str, Any], CompiledPolicy] = {}

    def _binding_items(self) -> dict:
        return self.cache.cache(self.binding_prefix).items

    def has_bindings(self) -> bool:
        return bool(self._binding_items())

    def pairs(self) -> list[tuple[CompiledPolicy, dict, Matcher]]:
        """(policy, binding, the binding's matcher) for every binding whose policy
        exists, in binding name order."""
        items = self._binding_items()
        if len(self._bindings) != len(items) or any(k not in items for k in self._bindings):
            self._bindings = {k: v for k, v in self._bindings.items() if k in items}
        out = []
        for key in sorted(items):
            entry = items[key]
            cached = self._bindings.get(key)
            if cached is None or cached[0] != entry.rv:
                obj = entry.object()
                cached = self._bindings[key] = (entry.rv, obj, Matcher((obj.get("spec") or {}).get("matchResources")))
            _, binding, matcher = cached
            policy = self.policy((binding.get("spec") or {}).get("policyName") or "")
            if policy is not None:
                out.append((policy, binding, matcher))
        return out

    def policy(self, name: str) -> CompiledPolicy | None:
        key = object_key(self.policy_kind, "", name)
        entry = self.cache.cache(self.policy_prefix).items.get(key)
        if entry is None:
            self._policies.pop(key, None)
            return None
        cached = self._policies.get(key)
        if cached is None or cached[0] != entry.rv:
            obj = entry.object()
            md = obj.get("metadata") or {}
            compiled_key = (md.get("uid") or "", md.get("generation"))
            compiled = self._compiled.get(compiled_key)
            if compiled is None:
                compiled = CompiledPolicy(obj)
                if len(self._compiled) > 1024:
                    self._compiled.clear()
                self._compiled[compiled_key] = compiled
            cached = self._policies[key] = (entry.rv, compiled)
        return cached[1]

    # --- what evaluation reads -------------------------------------------------------

    def namespace(self, name: str) -> dict | None:
        entry = self.cache.cache(key_prefix(self.namespace_kind)).items.get(object_key(self.namespace_kind, "", name))
        return entry.object() if entry is not None else None

    def namespace_labels(self, name: str) -> dict | None:
        entry = self.cache.cache(key_prefix(self.namespace_kind)).items.get(object_key(self.namespace_kind, "", name))
        return entry.labels if entry is not None else None

    def param_kind(self, api_version: str, kind: str) -> "KindInfo | None":
        return self.registry.by_api_version_kind(api_version, kind)

    def params(self, kind: "KindInfo", namespace: str, name: str | None, selector: Any) -> list[dict]:
        """The parameter objects a binding names: one by name, or all its selector
        matches (in ``namespace``, or all namespaces when empty)."""
        cache = self.cache.cache(key_prefix(kind))
        if name:
            entry = cache.items.get(object_key(kind, namespace, name))
            return [entry.object()] if entry is not None else []
        entries = cache.sorted_entries(namespace if kind.namespaced and namespace else None)
        return [e.object() for e in entries if selector(e.labels)]
