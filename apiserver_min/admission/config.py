"""The admission configuration file (``--admission-control-config-file``).

An ``AdmissionConfiguration`` (YAML or JSON) names plugins and gives each its
configuration, inline or in a file of its own::

    apiVersion: apiserver.config.orch.io/v1
    kind: AdmissionConfiguration
    plugins:
    - name: PodSecurity
      configuration: {apiVersion: pod-security.admission.config.orch.io/v1, kind: PodSecurityConfiguration, ...}
    - name: PodNodeSelector
      path: podnodeselector.yaml     # relative to this file's directory

It is read once at start. Plugins' factories ask ``for_plugin(name)`` for their
part; what the part must hold is each plugin's business (and a start-up error of
its own when wrong). Configuration for a plugin that is not enabled is kept and
unused, as upstream; a plugin name this server does not know is an error.
"""

from __future__ import annotations

import copy
import dataclasses
import os
from typing import Any, Collection, Mapping

from ..api import codec, names

KIND = "AdmissionConfiguration"
# The group of upstream's apiserver.config.k8s.io (v1) and apiserver.k8s.io (v1alpha1),
# both in the project's spelling; every one of them has the same shape.
API_VERSIONS = (
    f"apiserver.config.{names.DOMAIN}/v1",
    f"apiserver.config.{names.DOMAIN}/v1alpha1",
    f"apiserver.{names.DOMAIN}/v1alpha1",
)


class AdmissionConfigError(ValueError):
    """The file, or a plugin's part of it, is unusable: the message names the file."""


@dataclasses.dataclass(frozen=True)
class PluginConfig:
    name: str
    configuration: dict
    source: str  # the file the configuration was read from (relative paths inside it resolve against its directory)


@dataclasses.dataclass(frozen=True)
class AdmissionConfig:
    """The loaded file: each configured plugin's configuration, by plugin name."""

    path: str = ""
    plugins: Mapping[str, PluginConfig] = dataclasses.field(default_factory=dict)

    def for_plugin(self, name: str) -> dict | None:
        """The plugin's configuration (a private copy), or None when the file gives none."""
        entry = self.plugins.get(name)
        return copy.deepcopy(entry.configuration) if entry is not None else None

    def source_of(self, name: str) -> str:
        """The file the plugin's configuration came from ("" when none)."""
        entry = self.plugins.get(name)
        return entry.source if entry is not None else ""

    def error(self, name: str, detail: str) -> AdmissionConfigError:
        """An error about plugin NAME's configuration, naming the file it came from."""
        return AdmissionConfigError(f"admission plugin {name}: configuration in {self.source_of(name)}: {detail}")


def _read_document(path: str, what: str) -> Any:
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise AdmissionConfigError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    try:
        return codec.load_yaml(data)  # JSON is YAML too
    except ValueError as exc:
        raise AdmissionConfigError(f"{what} {path} is neither YAML nor JSON: {exc}") from None


def load(path: str, known_plugins: Collection[str]) -> AdmissionConfig:
    """Read and check the admission configuration file at PATH; AdmissionConfigError
    naming the file and the problem when it is unusable."""
    doc = _read_document(path, "admission configuration file")
    where = f"admission configuration file {path}"
    if not isinstance(doc, dict):
        raise AdmissionConfigError(f"{where}: must be an object with apiVersion, kind and plugins")
    api_version, kind = doc.get("apiVersion"), doc.get("kind")
    if kind != KIND:
        raise AdmissionConfigError(f"{where}: kind must be {KIND}, not {kind!r}")
    if api_version not in API_VERSIONS:
        raise AdmissionConfigError(
            f"{where}: apiVersion {api_version!r} is not supported (supported: {', '.join(API_VERSIONS)})"
        )
    unknown = sorted(set(doc) - {"apiVersion", "kind", "plugins"})
    if unknown:
        raise AdmissionConfigError(f"{where}: unknown field(s) {', '.join(unknown)}")
    items = doc.get("plugins")
    if items is None:
        items = []
    if not isinstance(items, list):
        raise AdmissionConfigError(f"{where}: plugins must be a list")
    base = os.path.dirname(os.path.abspath(path))
    plugins: dict[str, PluginConfig] = {}
    for i, item in enumerate(items):
        at = f"{where}: plugins[{i}]"
        if not isinstance(item, dict):
            raise AdmissionConfigError(f"{at}: must be an object with name and configuration or path")
        extra = sorted(set(item) - {"name", "configuration", "path"})
        if extra:
            raise AdmissionConfigError(f"{at}: unknown field(s) {', '.join(extra)}")
        name = item.get("name")
        if not isinstance(name, str) or not name:
            raise AdmissionConfigError(f"{at}.name: required")
        if name not in known_plugins:
            raise AdmissionConfigError(f"{at}.name: unknown admission plugin {name!r}")
        if name in plugins:
            raise AdmissionConfigError(f"{at}.name: plugin {name} is configured twice")
        configuration, file_path = item.get("configuration"), item.get("path")
        if configuration is not None and file_path not in (None, ""):
            raise AdmissionConfigError(f"{at}: give either configuration or path, not both")
        source = path
        if file_path not in (None, ""):
            if not isinstance(file_path, str):
                raise AdmissionConfigError(f"{at}.path: must be a string")
            source = file_path if os.path.isabs(file_path) else os.path.join(base, file_path)
            try:
                configuration = _read_document(source, f"configuration file of admission plugin {name}")
            except AdmissionConfigError as exc:
                raise AdmissionConfigError(f"{at}.path: {exc}") from None
        if configuration is None:
            raise AdmissionConfigError(f"{at}: configuration or path is required")
        if not isinstance(configuration, dict):
            raise AdmissionConfigError(f"{at}: the configuration of plugin {name} must be an object")
        plugins[name] = PluginConfig(name, configuration, source)
    return AdmissionConfig(path, plugins)


def strict_fields(config: Mapping, allowed: Collection[str], what: str) -> None:
    """ValueError naming the fields of CONFIG outside ALLOWED: a configuration field
    this server would not act on is refused, not ignored."""
    unknown = sorted(set(config) - set(allowed))
    if unknown:
        raise ValueError(f"{what}: unknown field(s) {', '.join(unknown)}")
