"""Encryption at rest: the ``EncryptionConfiguration`` file and the value transformers.

The file (``--encryption-provider-config``, YAML or JSON)::

    apiVersion: apiserver.config.orch.io/v1
    kind: EncryptionConfiguration
    resources:
    - resources: [secrets, "*.apps"]          # resource[.group]; "*.", "*.<group>", "*.*" wildcards
      providers:                              # the first encrypts; every one decrypts
      - aesgcm: {keys: [{name: key2, secret: <base64 of 16, 24 or 32 bytes>}]}
      - aescbc: {keys: [{name: key1, secret: <base64>}]}
      - secretbox: {keys: [{name: k, secret: <base64 of 32 bytes>}]}
      - identity: {}                          # plaintext: written when first, read always

An encrypted value is ``k8s:enc:<provider>:v1:<key name>:`` followed by the
provider's bytes (upstream's prefix, kept so stored data is recognisable):

- aescbc: a random 16-byte IV, then AES-CBC of the PKCS#7-padded value;
- aesgcm: a random 12-byte nonce, then AES-GCM's ciphertext and tag, with the
  storage key as associated data (a value copied to another key does not decrypt).
  Random nonces are safe for about 2^32 writes per key; rotate keys well before
  (upstream advises every 200 000 writes);
- secretbox: a random 24-byte nonce, then XSalsa20-Poly1305 (PyNaCl; the
  ``cryptography`` package has no XSalsa20).

Where the transforming happens, and why there: in a wrapper around the
:class:`Backend` (:class:`EncryptingBackend`) for everything that reads and
writes storage through the backend API — the generic store's creates, updates,
gets, lists and deletes, and the allocators and repair loops that use the
backend directly — so both backends (SQLite, etcd) and every caller are covered by
one class, and nothing above storage sees ciphertext. The watch cache reads
the *inner* backend and decrypts each value itself with the same
:class:`Transformers`: a wrapper could only fail a whole list or end the whole
watch on one bad value, whereas the cache must keep serving every other object,
remember which ones it could not decrypt (``ResourceCache.undecryptable``) and
let the store fail reads and lists of exactly those with a 500.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import os
from typing import Any, AsyncIterator, Iterable, Protocol

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from ..api import codec, names
from ..api.kinds import KindInfo
from .interface import Backend, ConflictError, Event, KeyNotFoundError, KeyValue, ListResult, TransformError

KIND = "EncryptionConfiguration"
API_VERSIONS = (f"apiserver.config.{names.DOMAIN}/v1",)
PREFIX = names.ENCRYPTED_VALUE_PREFIX.encode()
PROVIDERS = ("identity", "aescbc", "aesgcm", "secretbox")
# Providers upstream has that this server does not: refused by name at start.
UNSUPPORTED_PROVIDERS = ("kms",)


class EncryptionConfigError(ValueError):
    """The configuration file is unusable; the message names the file and the field."""


# --- providers ------------------------------------------------------------------------


class Provider(Protocol):
    name: str  # identity, aescbc, ...

    def prefixes(self) -> Iterable[tuple[bytes, str]]:
        """The value prefixes this provider reads, each with its key's name."""

    def encrypt(self, key: str, plaintext: bytes) -> bytes: ...

    def decrypt(self, key: str, key_name: str, body: bytes) -> bytes:
        """``body`` is the value after the prefix of key ``key_name``."""


class Identity:
    name = "identity"

    def prefixes(self) -> Iterable[tuple[bytes, str]]:
        return ()

    def encrypt(self, key: str, plaintext: bytes) -> bytes:
        return plaintext

    def decrypt(self, key: str, key_name: str, body: bytes) -> bytes:
        return body


def _prefix(provider: str, key_name: str) -> bytes:
    return PREFIX + f"{provider}:v1:{key_name}:".encode()


class _Keyed:
    """A provider with named keys: the first key encrypts, any of them decrypts."""

    name = ""

    def __init__(self, keys: list[tuple[str, bytes]]):
        self.keys = [(n, _prefix(self.name, n), self._cipher(secret)) for n, secret in keys]
        self._by_name = {n: c for n, _, c in self.keys}

    def _cipher(self, secret: bytes) -> Any:
        raise NotImplementedError

    def prefixes(self) -> Iterable[tuple[bytes, str]]:
        return [(p, n) for n, p, _ in self.keys]

    def encrypt(self, key: str, plaintext: bytes) -> bytes:
        _, prefix, cipher = self.keys[0]
        return prefix + self._seal(cipher, key, plaintext)

    def decrypt(self, key: str, key_name: str, body: bytes) -> bytes:
        return self._open(self._by_name[key_name], key, body)

    def _seal(self, cipher: Any, key: str, plaintext: bytes) -> bytes:
        raise NotImplementedError

    def _open(self, cipher: Any, key: str, body: bytes) -> bytes:
        raise NotImplementedError


class AESCBC(_Keyed):
    name = "aescbc"

    def _cipher(self, secret: bytes) -> Any:
        return algorithms.AES(secret)

    def _seal(self, cipher: Any, key: str, plaintext: bytes) -> bytes:
        iv = os.urandom(16)
        padder = padding.PKCS7(128).padder()
        padded = padder.update(plaintext) + padder.finalize()
        enc = Cipher(cipher, modes.CBC(iv)).encryptor()
        return iv + enc.update(padded) + enc.finalize()

    def _open(self, cipher: Any, key: str, body: bytes) -> bytes:
        if len(body) < 32 or len(body) % 16:
            raise ValueError("the ciphertext is not a whole number of AES blocks after the IV")
        dec = Cipher(cipher, modes.CBC(body[:16])).decryptor()
        padded = dec.update(body[16:]) + dec.finalize()
        unpadder = padding.PKCS7(128).unpadder()
        return unpadder.update(padded) + unpadder.finalize()  # ValueError on bad padding (a wrong key)


class AESGCMProvider(_Keyed):
    name = "aesgcm"

    def _cipher(self, secret: bytes) -> Any:
        return AESGCM(secret)

    def _seal(self, cipher: Any, key: str, plaintext: bytes) -> bytes:
        nonce = os.urandom(12)
        return nonce + cipher.encrypt(nonce, plaintext, key.encode())

    def _open(self, cipher: Any, key: str, body: bytes) -> bytes:
        if len(body) < 12 + 16:
            raise ValueError("the value is shorter than a nonce and a tag")
        return cipher.decrypt(body[:12], body[12:], key.encode())


class Secretbox(_Keyed):
    name = "secretbox"

    def _cipher(self, secret: bytes) -> Any:
        import nacl.secret  # the library (0.8 MB) for the servers configured with this provider

        return nacl.secret.SecretBox(secret)

    def _seal(self, cipher: Any, key: str, plaintext: bytes) -> bytes:
        return bytes(cipher.encrypt(plaintext))  # the 24-byte random nonce, then the box

    def _open(self, cipher: Any, key: str, body: bytes) -> bytes:
        import nacl.exceptions

        try:
            return bytes(cipher.decrypt(body))
        except nacl.exceptions.CryptoError as exc:
            raise ValueError(str(exc)) from None  # as the other providers report a wrong key


KEY_SIZES = {"aescbc": (16, 24, 32), "aesgcm": (16, 24, 32), "secretbox": (32,)}
_CLASSES: dict[str, type[_Keyed]] = {"aescbc": AESCBC, "aesgcm": AESGCMProvider, "secretbox": Secretbox}


# --- the transformers of every resource ------------------------------------------------


@dataclasses.dataclass
class ResourceTransformer:
    """The providers of one resource: the first writes, all read."""

    pattern: str  # the configuration's entry that chose these providers, for messages
    providers: list[Provider]

    def __post_init__(self) -> None:
        self.writer = self.providers[0]
        self.reads_plaintext = any(isinstance(p, Identity) for p in self.providers)
        self.by_prefix: dict[bytes, tuple[Provider, str]] = {}
        for p in self.providers:
            for prefix, key_name in p.prefixes():
                self.by_prefix.setdefault(prefix, (p, key_name))
        written = list(self.writer.prefixes())
        self.write_prefix = written[0][0] if written else None  # None: the writer is identity

    def is_current(self, stored: bytes) -> bool:
        """Whether a stored value is already as the first provider and key would write it."""
        if self.write_prefix is None:
            return not stored.startswith(PREFIX)
        return stored.startswith(self.write_prefix)


class Transformers:
    """Which providers each stored resource uses, by storage key prefix."""

    def __init__(
        self,
        by_key_prefix: dict[str, ResourceTransformer],
        groups: Iterable[str] = (),
        rules: Iterable[tuple[str, ResourceTransformer]] = (),
    ):
        self._by_prefix = sorted(by_key_prefix.items(), key=lambda kv: -len(kv[0]))
        # The configuration's resource[.group] rules, in order: resources defined at run time
        # (custom resources, whose groups always hold a dot) are matched against them.
        self._rules = list(rules)
        # Every value read or written asks for its key's transformer (the watch cache too,
        # for unencrypted resources): remember the answer per resource prefix, which is
        # the key's first segment, or its first two when the first is an API group.
        self._groups = frozenset(f"/{g}/" for g in groups)
        self._memo: dict[str, ResourceTransformer | None] = {}

    def _scan(self, key: str) -> ResourceTransformer | None:
        for p, t in self._by_prefix:
            if key.startswith(p):
                return t
        parts = key.split("/")
        if len(parts) > 3 and "." in parts[1]:  # /<group>/<resource>/...: a kind not known at start
            for rule, t in self._rules:
                if _covers(rule, parts[2], parts[1]):
                    return t
        return None

    def for_key(self, key: str) -> ResourceTransformer | None:
        i = key.find("/", 1)
        if i < 0:
            return self._scan(key)
        seg = key[: i + 1]
        if seg in self._groups or "." in seg:
            j = key.find("/", i + 1)
            if j < 0:
                return self._scan(key)
            seg = key[: j + 1]
        try:
            return self._memo[seg]
        except KeyError:
            t = self._memo[seg] = self._scan(seg)
            return t

    def to_storage(self, key: str, value: bytes) -> bytes:
        t = self.for_key(key)
        if t is None:
            return value
        return t.writer.encrypt(key, value)

    def from_storage(self, key: str, value: bytes) -> bytes:
        encrypted = value.startswith(PREFIX)
        t = self.for_key(key)
        if t is None:
            if encrypted:
                raise TransformError(
                    key, f"the value is encrypted ({_describe(value)}) but no provider is configured for this resource"
                )
            return value
        if not encrypted:
            if t.reads_plaintext:
                return value
            raise TransformError(
                key, f"the value is not encrypted and the identity provider is not configured for {t.pattern!r}"
            )
        end = value.find(b":", value.find(b":v1:", len(PREFIX)) + 4)
        prefix = value[: end + 1]
        found = t.by_prefix.get(prefix) if end > 0 else None
        if found is None:
            raise TransformError(key, f"no configured key can decrypt it: {_describe(value)} is not configured")
        provider, key_name = found
        try:
            return provider.decrypt(key, key_name, value[end + 1 :])
        except (ValueError, InvalidTag) as exc:
            raise TransformError(
                key, f"{provider.name} key {key_name!r} failed to decrypt it ({type(exc).__name__}: {exc})"
            ) from None


def _describe(value: bytes) -> str:
    parts = value[len(PREFIX) :].split(b":", 3)
    if len(parts) < 4:
        return "an unknown encryption prefix"
    return f"{parts[0].decode(errors='replace')} key {parts[2].decode(errors='replace')!r}"


# --- the configuration file ---------------------------------------------------------------


def _split_resource(entry: str) -> tuple[str, str]:
    resource, _, group = entry.partition(".")
    return resource, group


def _covers(pattern: str, resource: str, group: str) -> bool:
    r, g = _split_resource(pattern)
    return (r == "*" or r == resource) and (g == "*" or g == group)


def _key_list(where: str, provider: str, spec: Any) -> list[tuple[str, bytes]]:
    if not isinstance(spec, dict):
        raise EncryptionConfigError(f"{where}.{provider}: must be an object with keys")
    unknown = set(spec) - {"keys"}
    if unknown:
        raise EncryptionConfigError(f"{where}.{provider}: unknown field {sorted(unknown)[0]!r}")
    keys = spec.get("keys")
    if not isinstance(keys, list) or not keys:
        raise EncryptionConfigError(f"{where}.{provider}.keys: at least one key is required")
    out: list[tuple[str, bytes]] = []
    for i, k in enumerate(keys):
        kw = f"{where}.{provider}.keys[{i}]"
        if not isinstance(k, dict):
            raise EncryptionConfigError(f"{kw}: must be an object with name and secret")
        unknown = set(k) - {"name", "secret"}
        if unknown:
            raise EncryptionConfigError(f"{kw}: unknown field {sorted(unknown)[0]!r}")
        name, secret = k.get("name"), k.get("secret")
        if not isinstance(name, str) or not name:
            raise EncryptionConfigError(f"{kw}.name: required")
        if ":" in name:
            raise EncryptionConfigError(f"{kw}.name: {name!r} must not contain ':' (it is part of the stored prefix)")
        if any(name == n for n, _ in out):
            raise EncryptionConfigError(f"{kw}.name: duplicate key name {name!r}")
        if not isinstance(secret, str) or not secret:
            raise EncryptionConfigError(f"{kw}.secret: required")
        try:
            raw = base64.b64decode(secret, validate=True)
        except (binascii.Error, ValueError):
            raise EncryptionConfigError(f"{kw}.secret: not valid base64") from None
        sizes = KEY_SIZES[provider]
        if len(raw) not in sizes:
            raise EncryptionConfigError(
                f"{kw}.secret: {provider} needs a key of {' or '.join(map(str, sizes))} bytes, got {len(raw)}"
            )
        out.append((name, raw))
    return out


def _provider(where: str, spec: Any) -> Provider:
    if not isinstance(spec, dict) or len(spec) != 1:
        raise EncryptionConfigError(f"{where}: exactly one provider type is required, one of {', '.join(PROVIDERS)}")
    ((ptype, body),) = spec.items()
    if ptype in UNSUPPORTED_PROVIDERS:
        raise EncryptionConfigError(f"{where}: the {ptype} provider is not supported by this server")
    if ptype not in PROVIDERS:
        raise EncryptionConfigError(f"{where}: unknown provider {ptype!r}, expected one of {', '.join(PROVIDERS)}")
    if ptype == "identity":
        if body not in (None, {}):
            raise EncryptionConfigError(f"{where}.identity: takes no fields")
        return Identity()
    return _CLASSES[ptype](_key_list(where, ptype, body))


def parse(doc: Any, kinds: Iterable[KindInfo]) -> Transformers:
    """Build the transformers from a decoded configuration (errors name the field)."""
    kinds = list(kinds)
    if not isinstance(doc, dict):
        raise EncryptionConfigError("the document must be an object")
    if doc.get("kind") != KIND:
        raise EncryptionConfigError(f"kind: must be {KIND}, got {doc.get('kind')!r}")
    if doc.get("apiVersion") not in API_VERSIONS:
        raise EncryptionConfigError(f"apiVersion: must be {API_VERSIONS[0]}, got {doc.get('apiVersion')!r}")
    unknown = set(doc) - {"kind", "apiVersion", "resources"}
    if unknown:
        raise EncryptionConfigError(f"unknown field {sorted(unknown)[0]!r}")
    entries = doc.get("resources")
    if not isinstance(entries, list) or not entries:
        raise EncryptionConfigError("resources: at least one entry is required")
    rules: list[tuple[str, ResourceTransformer]] = []
    seen: list[str] = []
    for i, entry in enumerate(entries):
        where = f"resources[{i}]"
        if not isinstance(entry, dict):
            raise EncryptionConfigError(f"{where}: must be an object with resources and providers")
        unknown = set(entry) - {"resources", "providers"}
        if unknown:
            raise EncryptionConfigError(f"{where}: unknown field {sorted(unknown)[0]!r}")
        resources, providers = entry.get("resources"), entry.get("providers")
        if not isinstance(resources, list) or not resources:
            raise EncryptionConfigError(f"{where}.resources: at least one resource is required")
        if not isinstance(providers, list) or not providers:
            raise EncryptionConfigError(f"{where}.providers: at least one provider is required")
        built = [_provider(f"{where}.providers[{j}]", p) for j, p in enumerate(providers)]
        for j, r in enumerate(resources):
            rw = f"{where}.resources[{j}]"
            if not isinstance(r, str) or not r or r != r.lower() or " " in r:
                raise EncryptionConfigError(f"{rw}: {r!r} is not a lowercase resource[.group]")
            res, group = _split_resource(r)
            if res == "*" and "." not in r:
                raise EncryptionConfigError(f"{rw}: '*' is not allowed; use '*.' (core), '*.<group>' or '*.*'")
            if not res or (group == "*" and res != "*"):
                raise EncryptionConfigError(f"{rw}: {r!r} is not a valid resource[.group]")
            norm = f"{res}.{group}"
            if norm in seen:
                raise EncryptionConfigError(f"{rw}: {r!r} is listed more than once")
            for earlier in seen:
                if _covers(earlier, res, group):
                    raise EncryptionConfigError(f"{rw}: {r!r} is masked by the earlier entry {earlier!r}")
            seen.append(norm)
            rules.append((norm, ResourceTransformer(r, built)))
    by_prefix: dict[str, ResourceTransformer] = {}
    for kind in kinds:
        prefix = f"/{kind.resource}/" if not kind.group else f"/{kind.group}/{kind.resource}/"
        if prefix in by_prefix or "/" in kind.resource:
            continue
        for norm, t in rules:
            if _covers(norm, kind.resource, kind.group):
                by_prefix[prefix] = t
                break
    return Transformers(by_prefix, {k.group for k in kinds if k.group}, rules)


def load(path: str, kinds: Iterable[KindInfo]) -> Transformers:
    """Read and check ``--encryption-provider-config``; errors name the file."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise EncryptionConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        doc = codec.load_yaml(data)  # JSON is YAML too
    except Exception as exc:  # noqa: BLE001 - any parse failure is reported as the file's error
        raise EncryptionConfigError(f"{path}: not valid YAML or JSON: {exc}") from None
    try:
        return parse(doc, kinds)
    except EncryptionConfigError as exc:
        raise EncryptionConfigError(f"{path}: {exc}") from None


# --- the backend wrapper ---------------------------------------------------------------------


class EncryptingBackend:
    """A :class:`Backend` that encrypts values on the way in and decrypts them on the way out."""

    def __init__(self, inner: Backend, transformers: Transformers):
        self.inner = inner
        self.transformers = transformers
        self.name = inner.name

    async def start(self) -> None:
        await self.inner.start()

    async def close(self) -> None:
        await self.inner.close()

    async def current_revision(self) -> int:
        return await self.inner.current_revision()

    async def compacted_revision(self) -> int:
        return await self.inner.compacted_revision()

    def _open(self, kv: KeyValue) -> KeyValue:
        value = self.transformers.from_storage(kv.key, kv.value)
        if value is kv.value:
            return kv
        return KeyValue(kv.key, value, kv.mod_revision, kv.create_revision)

    async def create(self, key: str, value: bytes) -> int:
        return await self.inner.create(key, self.transformers.to_storage(key, value))

    async def get(self, key: str, revision: int = 0) -> KeyValue | None:
        kv = await self.inner.get(key, revision)
        return None if kv is None else self._open(kv)

    async def update(self, key: str, value: bytes, expected_mod_revision: int) -> int:
        return await self.inner.update(key, self.transformers.to_storage(key, value), expected_mod_revision)

    async def delete(self, key: str, expected_mod_revision: int = 0) -> tuple[int, KeyValue]:
        rev, kv = await self.inner.delete(key, expected_mod_revision)
        try:
            return rev, self._open(kv)
        except TransformError:
            return rev, kv  # deleted all the same; its last value stays as stored

    async def list(self, prefix: str, revision: int = 0, start_after: str = "", limit: int = 0) -> ListResult:
        res = await self.inner.list(prefix, revision, start_after, limit)
        return ListResult([self._open(kv) for kv in res.items], res.revision, res.more, res.remaining)

    async def count(self, prefix: str) -> int:
        return await self.inner.count(prefix)

    async def watch(self, prefix: str, after_revision: int, prev: bool = True) -> AsyncIterator[Event]:
        it = self.inner.watch(prefix, after_revision, prev)
        try:
            async for ev in it:
                if ev.type == "PROGRESS":
                    yield ev
                    continue
                kv = self._open(ev.kv) if ev.type == "PUT" else ev.kv
                old = self._open(ev.prev) if ev.prev is not None else None
                yield Event(ev.type, kv, old)
        finally:
            await it.aclose()  # type: ignore[attr-defined]

    async def compact(self, revision: int) -> None:
        await self.inner.compact(revision)

    async def request_progress(self) -> None:
        await self.inner.request_progress()


# --- rotation ---------------------------------------------------------------------------------


@dataclasses.dataclass
class RewriteReport:
    rewritten: int = 0
    current: int = 0  # already written by the first provider's first key
    failed: list[str] = dataclasses.field(default_factory=list)  # reasons, one per object


async def rewrite_all(inner: Backend, transformers: Transformers, page: int = 500) -> RewriteReport:
    """Re-write every stored object of an encrypted resource whose value is not in the
    first provider's first key: after adding a key (first) or changing providers.

    Each write is a compare-and-swap against the revision read, retried when the object
    changed meanwhile, so it is safe beside running servers on etcd (on SQLite, run it
    with the server stopped: another process's writes reach its watch cache only on restart)."""
    report = RewriteReport()
    outer = EncryptingBackend(inner, transformers)
    start = ""
    while True:
        res = await inner.list("/", start_after=start, limit=page)
        for kv in res.items:
            t = transformers.for_key(kv.key)
            if t is None:
                continue
            while True:
                if t.is_current(kv.value):
                    report.current += 1
                    break
                try:
                    plain = transformers.from_storage(kv.key, kv.value)
                    await outer.update(kv.key, plain, kv.mod_revision)
                    report.rewritten += 1
                    break
                except TransformError as exc:
                    report.failed.append(str(exc))
                    break
                except ConflictError:
                    fresh = await inner.get(kv.key)
                    if fresh is None:
                        break
                    kv = fresh
                except KeyNotFoundError:
                    break
        if not res.more or not res.items:
            return report
        start = res.items[-1].key
