"""PodTolerationRestriction: a namespace's default tolerations (its
``scheduler.alpha.orch.io/defaultTolerations`` annotation, else the cluster default)
are merged into its new pods, and pods may only carry tolerations its allow-list
(``scheduler.alpha.orch.io/tolerationsWhitelist``, else the cluster's) covers."""

from __future__ import annotations

import json
from typing import Any

from ...api import names
from ...api import status as st
from ...api.podvalidation import validate_tolerations
from ...api.qos import pod_qos_class
from ...registry.lookup import ObjectLookup
from ..chain import Attributes
from ..config import strict_fields
from ..tolerations import allowed_by, merge

CONFIG_KIND = "Configuration"
CONFIG_API_VERSION = f"{names.POD_TOLERATION_RESTRICTION_CONFIG_GROUP}/v1alpha1"


def _tolerations(value: Any, path: str) -> list[dict]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError(f"{path}: must be a list of tolerations")
    errs = validate_tolerations(value, path)
    if errs:
        raise ValueError(", ".join(e.message() for e in errs))
    return value


def parse_configuration(doc: dict | None) -> tuple[list[dict], list[dict]]:
    """(cluster default tolerations, cluster allow-list) from the plugin's configuration."""
    if doc is None:
        return [], []
    if doc.get("kind") != CONFIG_KIND or doc.get("apiVersion") != CONFIG_API_VERSION:
        raise ValueError(
            f"expected kind {CONFIG_KIND} with apiVersion {CONFIG_API_VERSION}, "
            f"got kind {doc.get('kind')!r}, apiVersion {doc.get('apiVersion')!r}"
        )
    strict_fields(doc, ("apiVersion", "kind", "default", "whitelist"), "PodTolerationRestriction configuration")
    return _tolerations(doc.get("default"), "default"), _tolerations(doc.get("whitelist"), "whitelist")


class PodTolerationRestriction:
    name = "PodTolerationRestriction"
    resources = frozenset({("", "pods")})
    operations = frozenset({"CREATE", "UPDATE"})
    complete = True

    def __init__(self, server: Any, default: list[dict] | None = None, whitelist: list[dict] | None = None):
        self.server = server
        self.default = default or []
        self.whitelist = whitelist or []
        self._lookup: ObjectLookup | None = None

    @classmethod
    def from_config(cls, server: Any, doc: dict | None) -> "PodTolerationRestriction":
        return cls(server, *parse_configuration(doc))

    @property
    def lookup(self) -> ObjectLookup:
        if self._lookup is None:
            self._lookup = ObjectLookup(self.server.cache, self.server.registry, self.server.store)
        return self._lookup

    async def _namespace_tolerations(self, namespace: str, key: str) -> list[dict] | None:
        """The namespace's tolerations under annotation KEY; None when it has none."""
        ns = await self.lookup.get("namespaces", "", namespace)
        annotations = ((ns or {}).get("metadata") or {}).get("annotations") or {}
        if key not in annotations:
            return None
        raw = str(annotations[key])
        if not raw:
            return []
        try:
            value = json.loads(raw)
            return _tolerations(value, key)
        except ValueError as exc:
            raise st.ApiError(500, "", f"namespace {namespace} annotation {key}: {exc}") from None

    @staticmethod
    def _pod(attrs: Attributes) -> dict | None:
        if attrs.subresource or attrs.operation not in ("CREATE", "UPDATE"):
            return None
        pod = attrs.obj
        return pod if isinstance(pod, dict) and isinstance(pod.get("spec"), dict) else None

    async def admit(self, attrs: Attributes) -> None:
        pod = self._pod(attrs)
        if pod is None:
            return
        extra: list[dict] = []
        if attrs.operation == "CREATE":
            ts = await self._namespace_tolerations(attrs.namespace, names.ANNOTATION_DEFAULT_TOLERATIONS)
            extra = list(self.default if ts is None else ts)
        if pod_qos_class(pod) != "BestEffort":
            extra.append({"key": names.TAINT_MEMORY_PRESSURE, "operator": "Exists", "effect": "NoSchedule"})
        if extra:
            spec = pod["spec"]
            spec["tolerations"] = merge([t for t in spec.get("tolerations") or [] if isinstance(t, dict)], extra)

    async def validate(self, attrs: Attributes) -> None:
        pod = self._pod(attrs)
        if pod is None:
            return
        tolerations = [t for t in pod["spec"].get("tolerations") or [] if isinstance(t, dict)]
        if not tolerations:
            return
        allow = await self._namespace_tolerations(attrs.namespace, names.ANNOTATION_TOLERATIONS_WHITELIST)
        scope = "namespace"
        if allow is None:
            allow, scope = self.whitelist, "cluster"
        if allow and not allowed_by(tolerations, allow):
            raise st.ApiError(
                500,
                "",
                "pod tolerations (possibly merged with namespace default tolerations) "
                f"conflict with its {scope} whitelist",
            )
