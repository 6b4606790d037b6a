"""The effective configuration of the node agent: defaults, the config file, then flags.

``--config`` names an ``AgentConfiguration`` (``agent.config.orch.io/v1beta1``)
in YAML or JSON whose camelCase fields mirror the flags (see
:data:`agent.options.OPTIONS`). Decoding is strict: an unknown or duplicate
field, a wrong type or a bad value is an error naming the file and the field
path, and every such error in the file is reported together. Relative paths in
path fields are resolved against the file's directory.

Precedence: a flag given on the command line wins over the file, the file over
the defaults; feature gates merge per gate (the flag's setting of a gate wins).
A few fields have a different default when a config file is used (upstream's
secure config-file defaults: ``readOnlyPort: 0``, ``authentication.anonymous.
enabled: false``, ``authentication.webhook.enabled: true``, ``authorization.
mode: Webhook``).

The result is one frozen :class:`AgentConfig` that every component reads.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import os
import types
from typing import Any, Mapping, Sequence

import yaml  # only when a config file is used

from apiserver_min.api import names

from .featuregates import FeatureGateError, FeatureGates
from .options import BY_ATTR, BY_FIELD, OPTIONS, FlagError, Option, ParsedArgs, parse_args

__all__ = ["ConfigError", "Mode", "AgentConfig", "load_config_file", "build_config", "from_argv"]


class ConfigError(ValueError):
    """The config file (or the flags combined with it) cannot be used; ``errors`` lists why."""

    def __init__(self, errors: Sequence[str]) -> None:
        self.errors = tuple(errors)
        super().__init__("\n".join(self.errors))


class Mode(str, enum.Enum):
    API_SERVER = "api-server"
    STANDALONE = "standalone"

    def __str__(self) -> str:
        return self.value


# --- the effective configuration ------------------------------------------------


class _ConfigBase:
    """Methods of the generated :class:`AgentConfig` dataclass."""

    __slots__ = ()

    def feature(self, name: str) -> bool:
        return self.feature_gates.enabled(name)  # type: ignore[attr-defined]

    def source(self, attr: str) -> str:
        """Where a value came from: ``flag``, ``file`` or ``default``."""
        return self.sources.get(attr, "default")  # type: ignore[attr-defined]

    def option(self, attr: str) -> Option:
        return BY_ATTR[attr]


_EXTRA_FIELDS = [
    ("mode", Mode, dataclasses.field(default=Mode.STANDALONE)),
    ("config_file", str, dataclasses.field(default="")),
    ("explicit_flags", tuple, dataclasses.field(default=())),
    ("sources", Mapping, dataclasses.field(default_factory=lambda: types.MappingProxyType({}))),
    ("warnings", tuple, dataclasses.field(default=())),
]

# One attribute per option (``cfg.max_pods``, ``cfg.eviction_hard``,
# ``cfg.feature_gates`` as a FeatureGates) plus the extras above. Generated from
# the table so that a new option cannot be forgotten here.
AgentConfig = dataclasses.make_dataclass(
    "AgentConfig",
    [(o.attr, Any) for o in OPTIONS] + _EXTRA_FIELDS,
    bases=(_ConfigBase,),
    frozen=True,
    slots=True,
    eq=True,
)
AgentConfig.__module__ = __name__
AgentConfig.__doc__ = "The frozen effective configuration of the node agent (see agent.config)."


# --- the config file ------------------------------------------------------------


def _field_tree() -> dict:
    """Nested dict of config paths: leaves are Options, inner dicts are structs."""
    root: dict = {}
    for path, opt in BY_FIELD.items():
        node = root
        parts = path.split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = opt
    return root


_TREE = _field_tree()
_TOP_LEVEL_META = ("kind", "apiVersion")


class _Dup(dict):
    """A JSON object that remembers keys given twice."""

    duplicates: list


def _json_object(pairs):
    obj = _Dup()
    obj.duplicates = []
    for k, v in pairs:
        if k in obj:
            obj.duplicates.append(k)
        obj[k] = v
    return obj


class _Decoded:
    """A decoded document: plain values plus where each mapping key sits (YAML only)."""

    def __init__(self, data: Any, duplicates: list[tuple[str, int | None]], lines: dict[str, int]) -> None:
        self.data = data
        self.duplicates = duplicates  # (field path, line)
        self.lines = lines  # field path -> line (1-based), when known


def _decode_json(text: str) -> _Decoded:
    data = json.loads(text, object_pairs_hook=_json_object)
    dups: list[tuple[str, int | None]] = []

    def walk(v, path):
        if isinstance(v, _Dup):
            for k in v.duplicates:
                dups.append((f"{path}.{k}" if path else k, None))
            for k, child in v.items():
                walk(child, f"{path}.{k}" if path else k)
        elif isinstance(v, list):
            for i, child in enumerate(v):
                walk(child, f"{path}[{i}]")

    walk(data, "")
    return _Decoded(data, dups, {})


def _decode_yaml(text: str) -> _Decoded:
    node = yaml.compose(text, Loader=yaml.SafeLoader)
    if node is None:
        return _Decoded({}, [], {})
    constructor = yaml.SafeLoader("")
    dups: list[tuple[str, int | None]] = []
    lines: dict[str, int] = {}

    def build(n, path):
        if isinstance(n, yaml.MappingNode):
            out = {}
            for key_node, value_node in n.value:
                key = constructor.construct_object(key_node, deep=True)
                if not isinstance(key, str):
                    key = str(key)
                child = f"{path}.{key}" if path else key
                if key in out:
                    dups.append((child, key_node.start_mark.line + 1))
                lines.setdefault(child, key_node.start_mark.line + 1)
                out[key] = build(value_node, child)
            return out
        if isinstance(n, yaml.SequenceNode):
            return [build(c, f"{path}[{i}]") for i, c in enumerate(n.value)]
        return constructor.construct_object(n, deep=True)

    return _Decoded(build(node, ""), dups, lines)


def _where(file: str, decoded: _Decoded, path: str) -> str:
    line = decoded.lines.get(path)
    return f"{file}: line {line}: field {path}" if line else f"{file}: field {path}"


def load_config_file(path: str) -> dict[str, Any]:
    """Decode an AgentConfiguration file into ``{attr: value}`` for the fields it sets.

    Raises :class:`ConfigError` with one line per problem, each naming the file
    and the field path.
    """
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as exc:
        raise ConfigError([f"{path}: cannot read the config file (--config): {exc.strerror or exc}"]) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError([f"{path}: the config file is not UTF-8 text"]) from None
    try:
        if text.lstrip().startswith("{"):
            decoded = _decode_json(text)
        else:
            decoded = _decode_yaml(text)
    except json.JSONDecodeError as exc:
        raise ConfigError([f"{path}: line {exc.lineno}: invalid JSON: {exc.msg}"]) from None
    except Exception as exc:  # yaml.YAMLError and friends, imported lazily
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError([f"{path}: {where}invalid YAML: {problem}"]) from None

    data = decoded.data
    if not isinstance(data, Mapping):
        raise ConfigError([f"{path}: expected an {names.AGENT_CONFIG_KIND} object at the top level"])

    errors: list[str] = []
    for dup, line in decoded.duplicates:
        where = f"{path}: line {line}" if line else path
        errors.append(f'{where}: duplicate field "{dup}"')

    kind, api_version = data.get("kind"), data.get("apiVersion")
    if kind != names.AGENT_CONFIG_KIND:
        errors.append(f'{path}: field kind: must be "{names.AGENT_CONFIG_KIND}", got {json.dumps(kind)}')
    if api_version != names.AGENT_CONFIG_API_VERSION:
        errors.append(
            f'{path}: field apiVersion: must be "{names.AGENT_CONFIG_API_VERSION}", got {json.dumps(api_version)}'
        )

    base = os.path.dirname(os.path.abspath(path))
    values: dict[str, Any] = {}

    def walk(obj: Mapping, tree: dict, prefix: str) -> None:
        for key, value in obj.items():
            if not prefix and key in _TOP_LEVEL_META:
                continue
            fpath = f"{prefix}.{key}" if prefix else key
            spec = tree.get(key)
            if spec is None:
                errors.append(f'{_where(path, decoded, fpath)}: unknown field "{fpath}"')
                continue
            if isinstance(spec, dict):
                if value is None:
                    continue
                if not isinstance(value, Mapping):
                    errors.append(f"{_where(path, decoded, fpath)}: expected an object")
                    continue
                walk(value, spec, fpath)
                continue
            opt: Option = spec
            if value is None:
                continue  # null means "not set", as in upstream's decoding
            try:
                parsed = opt.type.from_file(value)
            except ValueError as exc:
                errors.append(f"{_where(path, decoded, fpath)}: {exc}")
                continue
            if opt.path and isinstance(parsed, str) and parsed and not os.path.isabs(parsed):
                parsed = os.path.normpath(os.path.join(base, parsed))
            values[opt.attr] = parsed

    walk(data, _TREE, "")
    if errors:
        raise ConfigError(errors)
    return values


# --- merging --------------------------------------------------------------------


def build_config(parsed: ParsedArgs) -> AgentConfig:
    """Defaults, then the config file (if ``--config``), then the flags given."""
    config_file = parsed.values.get("config", "")
    file_values: dict[str, Any] = {}
    if config_file:
        file_values = load_config_file(config_file)

    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for opt in OPTIONS:
        values[opt.attr] = opt.default_for_file if config_file else opt.default
    for attr, value in file_values.items():
        values[attr] = value
        sources[attr] = "file"
    for attr, value in parsed.values.items():
        values[attr] = value
        sources[attr] = "flag"

    # Feature gates merge per gate: the file's settings, then the flag's.
    gates_text = {**file_values.get("feature_gates", {}), **parsed.values.get("feature_gates", {})}
    try:
        gates = FeatureGates(gates_text)
    except FeatureGateError as exc:
        where = "--feature-gates" if "feature_gates" in parsed.values else f"{config_file}: field featureGates"
        raise ConfigError([f"{where}: {exc}"]) from None
    values["feature_gates"] = gates

    # --cert-dir follows --root-dir unless given.
    if "cert_dir" not in parsed.values:
        values["cert_dir"] = os.path.join(values["root_dir"], "pki")

    mode = Mode.API_SERVER if values["orchconfig"] else Mode.STANDALONE
    warnings = tuple(parsed.deprecation_warnings) + gates.warnings
    return AgentConfig(
        **values,
        mode=mode,
        config_file=os.path.abspath(config_file) if config_file else "",
        explicit_flags=parsed.explicit,
        sources=types.MappingProxyType(sources),
        warnings=warnings,
    )


def from_argv(argv: Sequence[str]) -> AgentConfig:
    """Parse flags and build the effective configuration (no validation)."""
    return build_config(parse_args(argv))


__all__ += ["FlagError"]
