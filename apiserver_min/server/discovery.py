"""Discovery documents (/api, /apis, per group and per group version) and /version.

Built once from the kind registry and the enabled group versions; served as
JSON. Clients learn resources, verbs, kinds and short names only from here.
"""

from __future__ import annotations

import hashlib
import platform
import sys
from typing import Callable

from ..api import names
from ..api.kinds import KindInfo, Registry
from ..version import __version__

# The API level this server implements, reported in /version so that clients
# pick a matching protocol; our own release is carried as build metadata.
API_MAJOR, API_MINOR = "1", "32"


def version_info() -> dict:
    return {
        "major": API_MAJOR,
        "minor": API_MINOR,
        "gitVersion": f"v{API_MAJOR}.{API_MINOR}.0+orch.{__version__}",
        "gitCommit": "",
        "gitTreeState": "clean",
        "buildDate": "",
        "goVersion": f"python{sys.version_info.major}.{sys.version_info.minor}",
        "compiler": "cpython",
        "platform": f"{platform.system().lower()}/{_arch()}",
    }


def _arch() -> str:
    m = platform.machine().lower()
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(m, m)


def _storage_hash(k: KindInfo) -> str:
    return hashlib.sha256(f"{k.group}/{k.version}/{k.kind}".encode()).digest()[:8].hex()


def _listed_alias(group: str) -> str | None:
    """The orch group an alias group stands for, when discovery lists it (None otherwise)."""
    return names.GROUP_ALIASES[group] if group in names.DISCOVERY_ALIAS_GROUPS else None


class Discovery:
    def __init__(self, registry: Registry, enabled: Callable[[str, str, str], bool], server_address: str):
        self.registry = registry
        self.enabled = enabled
        self.server_address = server_address

    def group_versions(self) -> list[tuple[str, str]]:
        return [
            (g, v)
            for g, v in self.registry.group_versions()
            if any(self.enabled(g, v, k.resource) for k in self.registry.in_group_version(g, v))
        ]

    def api_versions(self) -> dict:
        return {
            "kind": "APIVersions",
            "versions": [v for g, v in self.group_versions() if g == ""],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": self.server_address}],
        }

    def _group(self, group: str) -> dict | None:
        served = _listed_alias(group) or group
        versions = [v for g, v in self.group_versions() if g == served]
        if not versions:
            return None
        gvs = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
        return {"name": group, "versions": gvs, "preferredVersion": gvs[0]}

    def api_group_list(self) -> dict:
        groups = []
        seen = set()
        for g, _ in self.group_versions():
            if g and g not in seen:
                seen.add(g)
                groups.append(self._group(g))
        for alias in names.DISCOVERY_ALIAS_GROUPS:
            listed = self._group(alias)
            if listed is not None:
                groups.append(listed)
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}

    def api_group(self, group: str) -> dict | None:
        g = self._group(group)
        if g is None:
            return None
        return {"kind": "APIGroup", "apiVersion": "v1", **g}

    def resource_list(self, group: str, version: str) -> dict | None:
        served = _listed_alias(group)
        if served is not None:
            doc = self.resource_list(served, version)
            if doc is not None:
                doc["groupVersion"] = f"{group}/{version}"
            return doc
        kinds = [k for k in self.registry.in_group_version(group, version) if self.enabled(group, version, k.resource)]
        if not kinds:
            return None
        resources = []
        for k in kinds:
            r = {
                "name": k.resource,
                "singularName": k.singular_name,
                "namespaced": k.namespaced,
                "kind": k.kind,
                "verbs": sorted(k.verbs),
                "storageVersionHash": _storage_hash(k),
            }
            if k.short_names:
                r["shortNames"] = list(k.short_names)
            if k.categories:
                r["categories"] = list(k.categories)
            resources.append(r)
            for s in k.subresources:
                sr = {
                    "name": f"{k.resource}/{s.name}",
                    "singularName": "",
                    "namespaced": k.namespaced,
                    "kind": s.kind,
                    "verbs": sorted(s.verbs),
                }
                if s.group:
                    sr["group"], sr["version"] = s.group, s.version
                resources.append(sr)
        gv = f"{group}/{version}" if group else version
        return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}
