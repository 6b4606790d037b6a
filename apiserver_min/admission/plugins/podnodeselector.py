"""PodNodeSelector: a namespace's node selector (its ``scheduler.alpha.orch.io/node-selector``
annotation, else the cluster default) is merged into its new pods' node selectors;
a pod that contradicts it, or strays from the namespace's allow-list in the plugin's
configuration, is refused."""

from __future__ import annotations

from typing import Any

from ...api import names
from ...api import status as st
from ...api.validation import validate_label_key, validate_labels
from ...registry.lookup import ObjectLookup
from ..chain import Attributes
from ..config import strict_fields

CONFIG_KEY = "podNodeSelectorPluginConfig"
CLUSTER_DEFAULT = "clusterDefaultNodeSelector"


def parse_selector(text: str) -> dict[str, str]:
    """``key=value,key=value`` as a label map; ValueError as upstream words it."""
    out: dict[str, str] = {}
    if not text:
        return out
    for item in text.split(","):
        parts = item.split("=")
        if len(parts) != 2:
            raise ValueError(f"invalid selector: [{' '.join(parts)}]")
        key, value = parts[0].strip(), parts[1].strip()
        errs = validate_label_key(key, "key") or validate_labels({key: value}, "value")
        if errs:
            raise ValueError(errs[0].message())
        out[key] = value
    return out


def conflicts(a: dict[str, str], b: dict[str, str]) -> bool:
    return any(k in b and b[k] != v for k, v in a.items())


def parse_configuration(doc: dict | None) -> dict[str, dict[str, str]]:
    """Namespace (or ``clusterDefaultNodeSelector``) -> selector, from the plugin's
    configuration; ValueError naming the bad entry."""
    if doc is None:
        return {}
    strict_fields(doc, (CONFIG_KEY,), "PodNodeSelector configuration")
    entries = doc.get(CONFIG_KEY) or {}
    if not isinstance(entries, dict):
        raise ValueError(f"{CONFIG_KEY} must map namespace names (or {CLUSTER_DEFAULT}) to node selectors")
    out = {}
    for ns, selector in entries.items():
        if not isinstance(selector, str):
            raise ValueError(f'{CONFIG_KEY}.{ns}: must be a string such as "env=prod,tier=web"')
        try:
            out[str(ns)] = parse_selector(selector)
        except ValueError as exc:
            raise ValueError(f"{CONFIG_KEY}.{ns}: {exc}") from None
    return out


class PodNodeSelector:
    name = "PodNodeSelector"
    resources = frozenset({("", "pods")})
    operations = frozenset({"CREATE"})
    complete = True

    def __init__(self, server: Any, selectors: dict[str, dict[str, str]] | None = None):
        self.server = server
        self.selectors = selectors or {}
        self._lookup: ObjectLookup | None = None

    @classmethod
    def from_config(cls, server: Any, doc: dict | None) -> "PodNodeSelector":
        return cls(server, parse_configuration(doc))

    @property
    def lookup(self) -> ObjectLookup:
        if self._lookup is None:
            self._lookup = ObjectLookup(self.server.cache, self.server.registry, self.server.store)
        return self._lookup

    async def _namespace_selector(self, attrs: Attributes) -> dict[str, str]:
        ns = await self.lookup.get("namespaces", "", attrs.namespace)
        annotations = ((ns or {}).get("metadata") or {}).get("annotations") or {}
        if names.ANNOTATION_NODE_SELECTOR in annotations:
            try:
                return parse_selector(str(annotations[names.ANNOTATION_NODE_SELECTOR]))
            except ValueError as exc:
                raise st.forbidden("pods", attrs.name, "", f"{names.ANNOTATION_NODE_SELECTOR}: {exc}") from None
        return dict(self.selectors.get(CLUSTER_DEFAULT, {}))

    @staticmethod
    def _pod_spec(attrs: Attributes) -> dict | None:
        if attrs.subresource or attrs.operation != "CREATE":
            return None
        spec = (attrs.obj or {}).get("spec")
        return spec if isinstance(spec, dict) else None

    async def admit(self, attrs: Attributes) -> None:
        spec = self._pod_spec(attrs)
        if spec is None:
            return
        namespace_selector = await self._namespace_selector(attrs)
        pod_selector = dict(spec.get("nodeSelector") or {})
        if conflicts(namespace_selector, pod_selector):
            raise st.forbidden(
                "pods", attrs.name, "", "pod node label selector conflicts with its namespace node label selector"
            )
        merged = {**namespace_selector, **pod_selector}
        if merged:
            spec["nodeSelector"] = merged

    async def validate(self, attrs: Attributes) -> None:
        spec = self._pod_spec(attrs)
        if spec is None:
            return
        pod_selector = dict(spec.get("nodeSelector") or {})
        allowed = self.selectors.get(attrs.namespace, {})
        if allowed and any(allowed.get(k) != v for k, v in pod_selector.items()):
            raise st.forbidden(
                "pods", attrs.name, "", "pod node label selector labels conflict with its namespace whitelist"
            )
        if conflicts(await self._namespace_selector(attrs), pod_selector):
            raise st.forbidden(
                "pods", attrs.name, "", "pod node label selector conflicts with its namespace node label selector"
            )
