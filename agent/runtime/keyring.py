"""Registry credentials for image pulls, kept and looked up as upstream's node agent does.

Credentials come as Docker config documents, ``{location: entry}``: from a pod's
``imagePullSecrets`` (Secrets of type ``orch.io/dockerconfigjson``, whose
``.dockerconfigjson`` is ``{"auths": {...}}``, or ``orch.io/dockercfg``, whose
``.dockercfg`` is the bare mapping; the ``kubernetes.io/`` spellings too), from
the image credential provider plugins, and from the node's own Docker config
files. An entry has ``auth`` (base64 of ``user:password``, which wins) or
``username`` and ``password``; ``identitytoken`` and ``registrytoken`` go to the
runtime as the CRI's fields of those names.

A location is a registry host with an optional port and path (``reg.example.com``,
``*.example.com:5000/team``; a scheme and a leading ``/v1/`` or ``/v2/`` are
dropped). A :class:`Keyring` answers, for an image's repository, the credentials
of every location that matches it - same port, the same number of host labels
each matching its glob, the location's path a prefix of the image's - the most
specific location first (locations in reverse order, so ``quay.io/team`` comes
before ``quay.io``); Docker Hub images fall back to the credentials of
``index.docker.io``. The pull tries them in that order.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import fnmatch
import json
import os
import time
from typing import Any, Callable, Iterable, Mapping

from apiserver_min.api import names
from cri import api_pb2 as pb

from .. import logging as agent_logging

__all__ = [
    "Credential",
    "DockerConfig",
    "DockerConfigError",
    "Keyring",
    "NodeDockerConfig",
    "image_matches",
    "parse_dockercfg",
    "parse_docker_config_json",
    "pull_secret_configs",
    "repository",
    "split_reference",
]


log = agent_logging.get_logger("keyring")

NODE_CONFIG_LIFETIME = 300.0  # seconds the node's Docker config is kept before it is read again


class DockerConfigError(ValueError):
    """A Docker config document that cannot be read (named in the message)."""


@dataclasses.dataclass(frozen=True)
class Credential:
    username: str = ""
    password: str = ""
    identity_token: str = ""
    registry_token: str = ""

    def auth_config(self) -> pb.AuthConfig:
        return pb.AuthConfig(
            username=self.username,
            password=self.password,
            identity_token=self.identity_token,
            registry_token=self.registry_token,
        )


DockerConfig = dict[str, Credential]


# --- reading Docker config documents ---------------------------------------------------


def _entry(location: str, value: Any, where: str) -> Credential:
    if not isinstance(value, dict):
        raise DockerConfigError(f"{where}: the entry of {location!r} is not an object")
    fields = {}
    for key in ("username", "password", "auth", "identitytoken", "registrytoken"):
        item = value.get(key, "")
        if not isinstance(item, str):
            raise DockerConfigError(f"{where}: {location!r}.{key} is not a string")
        fields[key] = item
    username, password = fields["username"], fields["password"]
    if fields["auth"]:
        try:
            decoded = base64.b64decode(fields["auth"], validate=True).decode()
        except (binascii.Error, ValueError, UnicodeDecodeError):
            raise DockerConfigError(f"{where}: {location!r}.auth is not base64") from None
        username, sep, password = decoded.partition(":")
        if not sep:
            raise DockerConfigError(
                f"{where}: {location!r}.auth: unable to parse auth field, must be formatted as "
                "base64(username:password)"
            )
    return Credential(username, password, fields["identitytoken"], fields["registrytoken"])


def parse_dockercfg(doc: Any, where: str) -> DockerConfig:
    """The ``.dockercfg`` form: ``{location: entry}``."""
    if not isinstance(doc, dict):
        raise DockerConfigError(f"{where}: not a JSON object")
    return {str(location): _entry(str(location), value, where) for location, value in doc.items()}


def parse_docker_config_json(doc: Any, where: str) -> DockerConfig:
    """The ``config.json`` form: ``{"auths": {location: entry}}`` (other keys are the Docker
    client's own and play no part in pulls here)."""
    if not isinstance(doc, dict):
        raise DockerConfigError(f"{where}: not a JSON object")
    return parse_dockercfg(doc.get("auths") or {}, where)


def _json(raw: bytes, where: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise DockerConfigError(f"{where}: not JSON: {exc}") from None


def _type_name(value: Any) -> str:
    for prefix in names.SECRET_TYPE_DOMAINS:
        if isinstance(value, str) and value.startswith(prefix):
            return value[len(prefix) :]
    return ""


_JSON_TYPE = _type_name(names.SECRET_TYPE_DOCKER_CONFIG_JSON)
_CFG_TYPE = _type_name(names.SECRET_TYPE_DOCKERCFG)


def pull_secret_configs(secrets: Iterable[Mapping[str, Any]]) -> list[DockerConfig]:
    """The Docker configs of a pod's pull secrets, in the pod's order. A Secret of another
    type, or without its key, gives none (as upstream); one that cannot be read is an error."""
    out = []
    for secret in secrets:
        meta = secret.get("metadata") or {}
        kind = _type_name(secret.get("type"))
        data = secret.get("data") or {}
        key = {_JSON_TYPE: names.SECRET_KEY_DOCKER_CONFIG_JSON, _CFG_TYPE: names.SECRET_KEY_DOCKERCFG}.get(kind)
        if key is None or not data.get(key):
            continue
        where = f"secret {meta.get('namespace', '')}/{meta.get('name', '')} {key}"
        value = data[key]
        try:
            raw = value if isinstance(value, bytes) else base64.b64decode(str(value), validate=True)
        except (binascii.Error, ValueError):
            raise DockerConfigError(f"{where}: not base64") from None
        doc = _json(raw, where)
        out.append(parse_docker_config_json(doc, where) if kind == _JSON_TYPE else parse_dockercfg(doc, where))
    return out


# --- matching ---------------------------------------------------------------------------


def split_reference(ref: str) -> tuple[str, str, str]:
    """(host, port, path) of an image reference or a location, as a URL would parse it."""
    ref = ref.split("://", 1)[1] if "://" in ref else ref
    hostport, _, path = ref.partition("/")
    host, _, port = hostport.partition(":")
    return host, port, "/" + path if path else ""


def image_matches(pattern: str, image: str) -> bool:
    """Upstream's match: same port, same number of host labels each matching its glob, path prefix."""
    p_host, p_port, p_path = split_reference(pattern)
    i_host, i_port, i_path = split_reference(image)
    if p_port != i_port:
        return False
    p_labels, i_labels = p_host.split("."), i_host.split(".")
    if len(p_labels) != len(i_labels):
        return False
    if not all(fnmatch.fnmatchcase(label, glob) for glob, label in zip(p_labels, i_labels)):
        return False
    return i_path.startswith(p_path)


def _key(location: str) -> str:
    """A location as the keyring files it: no scheme, no ``/v1/``/``/v2/``, no bare ``/``."""
    ref = location.split("://", 1)[1] if location.startswith(("https://", "http://")) else location
    host, sep, path = ref.partition("/")
    path = sep + path
    if path.startswith(("/v1/", "/v2/")):
        path = path[3:]
    return host + path if path not in ("", "/") else host


def repository(image: str) -> str:
    """The repository an image reference pulls from, as upstream normalizes it for the
    lookup: no tag or digest, Docker Hub's domain and ``library/`` made explicit."""
    name = image.split("@", 1)[0]
    colon = name.rfind(":")
    if colon > name.rfind("/"):
        name = name[:colon]
    first, sep, rest = name.partition("/")
    if not sep or ("." not in first and ":" not in first and first != "localhost"):
        first, rest = names.DOCKER_HUB_DOMAIN, name
    elif first == names.DOCKER_DEFAULT_REGISTRY_HOST:
        first = names.DOCKER_HUB_DOMAIN
    if first == names.DOCKER_HUB_DOMAIN and "/" not in rest:
        rest = "library/" + rest
    return f"{first}/{rest}"


def _default_registry(image: str) -> bool:
    """Whether an image pulls from Docker Hub, by the look of its name."""
    first, sep, _ = image.partition("/")
    if not first:
        return False
    if not sep:
        return True
    if first in (names.DOCKER_HUB_DOMAIN, names.DOCKER_DEFAULT_REGISTRY_HOST):
        return True
    return "." not in first and ":" not in first


class Keyring:
    """Credentials by location, several per location (added in turn)."""

    def __init__(self, configs: Iterable[Mapping[str, Credential]] = ()) -> None:
        self._creds: dict[str, list[Credential]] = {}
        for config in configs:
            self.add(config)

    def __bool__(self) -> bool:
        return bool(self._creds)

    def add(self, config: Mapping[str, Credential]) -> None:
        for location, cred in config.items():
            self._creds.setdefault(_key(location), []).append(cred)

    def lookup(self, image: str) -> list[Credential]:
        """The credentials for ``image`` (best a repository, see :func:`repository`), the
        most specific location first; [] when none apply."""
        found = [
            cred for key in sorted(self._creds, reverse=True) if image_matches(key, image) for cred in self._creds[key]
        ]
        if not found and _default_registry(image):
            found = list(self._creds.get(names.DOCKER_DEFAULT_REGISTRY_HOST, ()))
        return found


class NodeDockerConfig:
    """The node's own Docker config, as upstream reads it: the first readable
    ``config.json`` in the agent's root directory, the working directory,
    ``$HOME/.docker`` and ``/.docker``; failing that, the first ``.dockercfg`` in the
    root directory, the working directory, ``$HOME`` and ``/``. Read again after
    five minutes, so that a changed file takes effect without a restart."""

    def __init__(self, root_dir: str, *, home: str | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        home = os.path.expanduser("~") if home is None else home
        self.json_paths = [
            os.path.join(d, names.DOCKER_CONFIG_JSON_FILE)
            for d in (root_dir, "", os.path.join(home, ".docker"), "/.docker")
        ]
        self.cfg_paths = [os.path.join(d, names.DOCKERCFG_FILE) for d in (root_dir, "", home, "/")]
        self._clock = clock
        self._cached: tuple[float, DockerConfig] | None = None

    def get(self) -> DockerConfig:
        now = self._clock()
        if self._cached is not None and now < self._cached[0]:
            return self._cached[1]
        config = self._read()
        self._cached = (now + NODE_CONFIG_LIFETIME, config)
        return config

    def _read(self) -> DockerConfig:
        for paths, parse in ((self.json_paths, parse_docker_config_json), (self.cfg_paths, parse_dockercfg)):
            for path in paths:
                path = os.path.abspath(path)
                try:
                    with open(path, "rb") as f:
                        raw = f.read()
                except OSError:
                    continue
                try:
                    config = parse(_json(raw, path), path)
                except DockerConfigError as exc:
                    log.warning("Skipping a Docker config file that cannot be read", err=exc)
                    continue
                log.v(4).info("Found the node's Docker config", path=path, entries=len(config))
                return config
        return {}
