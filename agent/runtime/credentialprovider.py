"""Image credential provider plugins (``--image-credential-provider-config`` and ``-bin-dir``).

The config file (kind ``CredentialProviderConfig``, ``agent.config.orch.io/v1``) lists
providers: ``name`` (an executable in the bin dir), ``matchImages`` (globs over
registry host names, with optional port and path prefix), ``defaultCacheDuration``,
``apiVersion`` (of the plugin protocol), ``args`` and ``env``. For an image that a
provider matches, the agent runs the plugin with a ``CredentialProviderRequest``
(``{"apiVersion", "kind", "image"}``) on stdin and reads a
``CredentialProviderResponse`` from stdout: ``cacheKeyType`` (``Image``,
``Registry`` or ``Global``), an optional ``cacheDuration`` and ``auth`` (match
pattern -> ``{username, password}``). Responses are cached under the image, its
registry or one global key for ``cacheDuration`` (else the provider's default; 0
means not cached). The responses join the node's keyring (:mod:`.keyring`): the
credentials whose pattern matches the image go to the runtime's ``PullImage``, the
most specific first, after those of the pod's pull secrets, as upstream's agent does.
A plugin that fails is logged and the pull goes on without its credentials.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import time
from typing import Any, Callable, Mapping

import yaml

from apiserver_min.api import names
from apiserver_min.api.duration import DurationError, parse_duration
from cri import api_pb2 as pb

from .. import logging as agent_logging
from .keyring import Credential, DockerConfig, Keyring, image_matches, split_reference

__all__ = [
    "CredentialProviderError",
    "CredentialProviders",
    "Provider",
    "image_matches",
    "load_config",
]

log = agent_logging.get_logger("credentialprovider")

CACHE_KEY_TYPES = ("Image", "Registry", "Global")
_GLOBAL = "\x00global"
PLUGIN_TIMEOUT = 60.0


class CredentialProviderError(ValueError):
    pass


@dataclasses.dataclass(frozen=True)
class Provider:
    name: str
    match_images: tuple[str, ...]
    default_cache_duration: float  # seconds
    api_version: str
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()


# --- the registry of an image (a cache key) --------------------------------------------


def _registry(image: str) -> str:
    host, port, _ = split_reference(image)
    return f"{host}:{port}" if port else host


# --- the config file --------------------------------------------------------------------


def load_config(path: str, bin_dir: str) -> list[Provider]:
    """The providers of ``path``; every problem named at once (CredentialProviderError)."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = yaml.safe_load(f)
    except (OSError, yaml.YAMLError) as exc:
        raise CredentialProviderError(f"{path}: cannot read the credential provider config: {exc}") from exc
    errors: list[str] = []
    if not isinstance(doc, dict):
        raise CredentialProviderError(f"{path}: not a {names.CREDENTIAL_PROVIDER_CONFIG_KIND} object")
    if doc.get("kind") != names.CREDENTIAL_PROVIDER_CONFIG_KIND:
        errors.append(f"kind: Unsupported value: {doc.get('kind')!r}: must be {names.CREDENTIAL_PROVIDER_CONFIG_KIND}")
    if doc.get("apiVersion") not in names.CREDENTIAL_PROVIDER_CONFIG_API_VERSIONS:
        errors.append(
            f"apiVersion: Unsupported value: {doc.get('apiVersion')!r}: supported values: "
            + ", ".join(names.CREDENTIAL_PROVIDER_CONFIG_API_VERSIONS)
        )
    entries = doc.get("providers")
    if not isinstance(entries, list) or not entries:
        errors.append("providers: Required value: at least one provider is required")
        entries = []
    providers: list[Provider] = []
    seen: set[str] = set()
    for i, entry in enumerate(entries):
        where = f"providers[{i}]"
        if not isinstance(entry, dict):
            errors.append(f"{where}: must be an object")
            continue
        provider = _provider(entry, where, bin_dir, errors)
        if provider is None:
            continue
        if provider.name in seen:
            errors.append(f"{where}.name: Duplicate value: {provider.name!r}")
        seen.add(provider.name)
        providers.append(provider)
    if errors:
        raise CredentialProviderError(f"{path}: " + "; ".join(errors))
    return providers


def _provider(entry: Mapping[str, Any], where: str, bin_dir: str, errors: list[str]) -> Provider | None:
    before = len(errors)
    name = entry.get("name")
    if not isinstance(name, str) or not name:
        errors.append(f"{where}.name: Required value: name is required")
        name = ""
    elif "/" in name or " " in name or name in (".", ".."):
        errors.append(f"{where}.name: Invalid value: {name!r}: must be a file name in the plugin directory")
    elif not os.access(os.path.join(bin_dir, name), os.X_OK):
        errors.append(f"{where}.name: Invalid value: {name!r}: no executable {os.path.join(bin_dir, name)}")
    match = entry.get("matchImages")
    if not isinstance(match, list) or not match:
        errors.append(f"{where}.matchImages: Required value: at least one pattern is required")
        match = []
    for j, pattern in enumerate(match):
        if not isinstance(pattern, str) or not pattern or any(c.isspace() for c in pattern):
            errors.append(f"{where}.matchImages[{j}]: Invalid value: {pattern!r}: must be an image pattern")
    duration = 0.0
    raw = entry.get("defaultCacheDuration")
    if raw is None:
        errors.append(f"{where}.defaultCacheDuration: Required value: defaultCacheDuration is required")
    else:
        try:
            duration = parse_duration(str(raw)).total_seconds()
        except DurationError as exc:
            errors.append(f"{where}.defaultCacheDuration: Invalid value: {raw!r}: {exc}")
        if duration < 0:
            errors.append(f"{where}.defaultCacheDuration: Invalid value: {raw!r}: must not be negative")
    api_version = entry.get("apiVersion")
    if api_version not in names.CREDENTIAL_PROVIDER_API_VERSIONS:
        errors.append(
            f"{where}.apiVersion: Unsupported value: {api_version!r}: supported values: "
            + ", ".join(names.CREDENTIAL_PROVIDER_API_VERSIONS)
        )
    args = entry.get("args") or []
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        errors.append(f"{where}.args: must be a list of strings")
        args = []
    env: list[tuple[str, str]] = []
    for k, var in enumerate(entry.get("env") or []):
        if not isinstance(var, dict) or not isinstance(var.get("name"), str) or not var.get("name"):
            errors.append(f"{where}.env[{k}]: must be {{name, value}} with a name")
            continue
        env.append((var["name"], str(var.get("value", ""))))
    if len(errors) > before:
        return None
    return Provider(str(name), tuple(match), duration, str(api_version), tuple(args), tuple(env))


# --- running the plugins ---------------------------------------------------------------


@dataclasses.dataclass
class _Cached:
    expires: float
    auth: dict[str, tuple[str, str]]


class CredentialProviders:
    """The configured plugins, their response cache, and the lookup for one image."""

    def __init__(
        self,
        providers: list[Provider],
        bin_dir: str,
        *,
        clock: Callable[[], float] = time.monotonic,
        timeout: float = PLUGIN_TIMEOUT,
    ) -> None:
        self.providers = providers
        self.bin_dir = bin_dir
        self._clock = clock
        self._timeout = timeout
        self._cache: dict[tuple[str, str], _Cached] = {}  # (provider, key) -> response
        self._locks = {p.name: asyncio.Lock() for p in providers}

    async def docker_configs(self, image: str) -> list[DockerConfig]:
        """The credentials of every provider matching ``image`` (its repository), one
        Docker config each, for the node's keyring."""
        out = []
        for provider in self.providers:
            if not any(image_matches(p, image) for p in provider.match_images):
                continue
            auth = await self._provide(provider, image)
            out.append({pattern: Credential(user, password) for pattern, (user, password) in auth.items()})
        return out

    async def auth_configs(self, image: str) -> list[pb.AuthConfig]:
        """The plugins' credentials for ``image``, the most specific pattern first; [] when none apply."""
        return [c.auth_config() for c in Keyring(await self.docker_configs(image)).lookup(image)]

    def _cached(self, provider: Provider, image: str) -> dict[str, tuple[str, str]] | None:
        now = self._clock()
        for key in (image, _registry(image), _GLOBAL):
            hit = self._cache.get((provider.name, key))
            if hit is None:
                continue
            if hit.expires > now:
                return hit.auth
            del self._cache[(provider.name, key)]
        return None

    async def _provide(self, provider: Provider, image: str) -> dict[str, tuple[str, str]]:
        async with self._locks[provider.name]:
            cached = self._cached(provider, image)
            if cached is not None:
                return cached
            try:
                response = await self._exec(provider, image)
                key_type, duration, auth = _parse_response(provider, response)
            except CredentialProviderError as exc:
                log.error("Credential provider plugin failed", provider=provider.name, image=image, err=exc)
                return {}
            if duration is None:
                duration = provider.default_cache_duration
            if duration > 0:
                key = {"Image": image, "Registry": _registry(image)}.get(key_type, _GLOBAL)
                self._cache[(provider.name, key)] = _Cached(self._clock() + duration, auth)
            return auth

    async def _exec(self, provider: Provider, image: str) -> bytes:
        request = json.dumps(
            {"apiVersion": provider.api_version, "kind": names.CREDENTIAL_PROVIDER_REQUEST_KIND, "image": image}
        ).encode()
        env = dict(os.environ)
        env.update(provider.env)
        binary = os.path.join(self.bin_dir, provider.name)
        try:
            proc = await asyncio.create_subprocess_exec(
                binary,
                *provider.args,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=env,
            )
        except OSError as exc:
            raise CredentialProviderError(f"cannot run {binary}: {exc}") from exc
        try:
            async with asyncio.timeout(self._timeout):
                out, err = await proc.communicate(request)
        except asyncio.TimeoutError:
            proc.kill()
            await proc.wait()
            raise CredentialProviderError(f"{binary} gave no answer within {self._timeout:g}s") from None
        except BaseException:
            # The caller gave up (cancelled, the agent stopping): the plugin must not
            # outlive the request it was run for.
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
            raise
        if proc.returncode != 0:
            detail = err.decode(errors="replace").strip()[-500:]
            raise CredentialProviderError(f"{binary} exited with status {proc.returncode}: {detail}")
        return out


def _parse_response(provider: Provider, raw: bytes) -> tuple[str, float | None, dict[str, tuple[str, str]]]:
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        raise CredentialProviderError(f"the response is not JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise CredentialProviderError("the response is not a JSON object")
    if doc.get("kind") != names.CREDENTIAL_PROVIDER_RESPONSE_KIND:
        raise CredentialProviderError(
            f"the response's kind is {doc.get('kind')!r}, not {names.CREDENTIAL_PROVIDER_RESPONSE_KIND}"
        )
    if doc.get("apiVersion") != provider.api_version:
        raise CredentialProviderError(
            f"the response's apiVersion is {doc.get('apiVersion')!r}, not the configured {provider.api_version}"
        )
    key_type = doc.get("cacheKeyType")
    if key_type not in CACHE_KEY_TYPES:
        raise CredentialProviderError(
            f"the response's cacheKeyType {key_type!r} is not one of {', '.join(CACHE_KEY_TYPES)}"
        )
    duration: float | None = None
    if doc.get("cacheDuration") is not None:
        try:
            duration = parse_duration(str(doc["cacheDuration"])).total_seconds()
        except DurationError as exc:
            raise CredentialProviderError(f"the response's cacheDuration: {exc}") from exc
    auth: dict[str, tuple[str, str]] = {}
    for pattern, cred in (doc.get("auth") or {}).items():
        if not isinstance(cred, dict):
            raise CredentialProviderError(f"the response's auth[{pattern!r}] is not an object")
        auth[str(pattern)] = (str(cred.get("username") or ""), str(cred.get("password") or ""))
    return str(key_type), duration, auth
