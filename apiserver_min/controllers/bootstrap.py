"""Bundled bootstrap-token controllers: the bootstrap signer and the token cleaner.

- Bootstrap signer: keeps the ConfigMap ``cluster-info`` in ``orch-public`` holding
  ``kubeconfig`` (the cluster CA and this server's address, see
  ``api/bootstraptoken.cluster_info_kubeconfig``) and one ``jws-kubeconfig-<id>``
  detached signature per bootstrap token that is marked for signing and has not
  expired. It re-signs when tokens change, when a token expires (even before the
  cleaner removes it), and when the CA file changes (checked every minute); it
  removes signatures of tokens that are gone. ``cluster-info`` is readable
  anonymously through the default RBAC policy (auth/policy.py).
- Token cleaner: deletes bootstrap-token secrets whose ``expiration`` has passed,
  at the moment of expiry (a timer per token) and in a sweep every minute.

Both react to informer events and write through their clients, each as its own
service account (bootstrap-signer, token-cleaner), as upstream.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import logging
import os

import orjson

from ..api import bootstraptoken as bt
from ..api import names
from ..api import status as st
from ..client.informer import InformerFactory
from ..client.interface import Client, DeleteOptions
from ..storage.cacher import CacheEvent, Entry
from .queue import RETRY_DELAY, KeyQueue

log = logging.getLogger("orch-apiserver.bootstrap")

RESYNC_SECONDS = 60.0
SIGNER_KEY = "cluster-info"


def _now() -> _dt.datetime:
    return _dt.datetime.now(_dt.timezone.utc)


def _is_token_secret(e: Entry) -> bool:
    return e.namespace == names.NS_SYSTEM and e.name.startswith(names.BOOTSTRAP_TOKEN_SECRET_PREFIX)


def _decode(e: Entry) -> bt.TokenSecret | None:
    """The token a cached secret holds, or None (wrong type, malformed, deleting)."""
    obj = orjson.loads(e.raw)
    if (obj.get("metadata") or {}).get("deletionTimestamp"):
        return None
    try:
        return bt.token_from_secret(obj)
    except bt.TokenError as exc:
        if obj.get("type") == names.BOOTSTRAP_TOKEN_SECRET_TYPE:
            log.debug("bootstrap token secret %s ignored: %s", e.name, exc)
        return None


def signatures(content: str, tokens: list[bt.TokenSecret], now: _dt.datetime) -> dict[str, str]:
    """``jws-kubeconfig-<id>`` -> signature for every token usable for signing."""
    return {bt.JWS_KEY_PREFIX + t.token.id: bt.sign_detached(content, t.token) for t in tokens if t.for_signing(now)}


def desired_data(current: dict | None, content: str, sigs: dict[str, str]) -> dict[str, str]:
    """cluster-info's data: keys other than ours kept, kubeconfig and the signatures set."""
    data = {
        k: v
        for k, v in (current or {}).items()
        if k != bt.CLUSTER_INFO_KUBECONFIG_KEY and not k.startswith(bt.JWS_KEY_PREFIX)
    }
    data[bt.CLUSTER_INFO_KUBECONFIG_KEY] = content
    data.update(sigs)
    return data


class BootstrapControllers:
    """The bootstrap signer (``signer_client``) and the token cleaner (``cleaner_client``),
    sharing the Secret and ConfigMap informers. ``cluster-info`` publishes ``ca_file``
    and ``server_url``."""

    def __init__(
        self, signer_client: Client, cleaner_client: Client, informers: InformerFactory, ca_file: str, server_url: str
    ):
        self.signer_client = signer_client
        self.cleaner_client = cleaner_client
        self.ca_file = ca_file
        self.server_url = server_url
        self.secret_kind = informers.kind("", "v1", "secrets")
        self.cm_kind = informers.kind("", "v1", "configmaps")
        self.secrets = informers.for_kind(self.secret_kind)
        self.configmaps = informers.for_kind(self.cm_kind)
        self.sign_queue, self.clean_queue = KeyQueue(), KeyQueue()
        self._ca: tuple[tuple, bytes] | None = None
        self._timers: dict[str, asyncio.TimerHandle] = {}

    def ca_pem(self) -> bytes:
        """The cluster CA as published, re-read when the file changes."""
        path = self.ca_file
        s = os.stat(path)
        stamp = (s.st_mtime_ns, s.st_size, s.st_ino)
        if self._ca is None or self._ca[0] != stamp:
            with open(path, "rb") as f:
                self._ca = (stamp, f.read())
        return self._ca[1]

    def kubeconfig(self) -> str:
        return bt.cluster_info_kubeconfig(self.server_url, self.ca_pem())

    # --- events ---------------------------------------------------------------------
    def start(self) -> list[asyncio.Task]:
        self.secrets.add_handler(self.on_secret)
        self.configmaps.add_handler(self.on_configmap)
        return [
            asyncio.create_task(
                self._loop(self.sign_queue, self.sync_cluster_info, "bootstrap signer"), name="bootstrap-signer"
            ),
            asyncio.create_task(self._loop(self.clean_queue, self.clean, "token cleaner"), name="token-cleaner"),
            asyncio.create_task(self._resync(), name="bootstrap-resync"),
        ]

    def stop(self) -> None:
        for h in self._timers.values():
            h.cancel()
        self._timers.clear()

    def on_secret(self, ev: CacheEvent | None) -> None:
        if ev is None:
            self.sign_queue.add(SIGNER_KEY)
            for e in self.secrets.list(names.NS_SYSTEM):
                if _is_token_secret(e):
                    self._track(e)
            return
        e = ev.entry
        if _is_token_secret(e):
            self.sign_queue.add(SIGNER_KEY)
            if ev.type == "DELETED":
                h = self._timers.pop(e.name, None)
                if h is not None:
                    h.cancel()
            else:
                self._track(e)

    def on_configmap(self, ev: CacheEvent | None) -> None:
        if ev is not None and ev.entry.namespace == names.NS_PUBLIC and ev.entry.name == names.CLUSTER_INFO_CONFIGMAP:
            self.sign_queue.add(SIGNER_KEY)

    def _track(self, e: Entry) -> None:
        """Clean now if expired, else set a timer for the moment it expires (which also
        makes the signer drop its signature then)."""
        ts = _decode(e)
        old = self._timers.pop(e.name, None)
        if old is not None:
            old.cancel()
        if ts is None:
            obj = orjson.loads(e.raw)
            if obj.get("type") == names.BOOTSTRAP_TOKEN_SECRET_TYPE and self._bad_expiration(obj):
                self.clean_queue.add(e.name)  # an unparseable expiration counts as expired
            return
        if ts.expiration is None:
            return
        delay = (ts.expiration - _now()).total_seconds()
        if delay <= 0:
            self.clean_queue.add(e.name)
            return

        def fire(name: str = e.name) -> None:
            self._timers.pop(name, None)
            self.clean_queue.add(name)
            self.sign_queue.add(SIGNER_KEY)

        self._timers[e.name] = asyncio.get_running_loop().call_later(delay + 0.05, fire)

    @staticmethod
    def _bad_expiration(obj: dict) -> bool:
        text = bt.secret_values(obj).get(bt.KEY_EXPIRATION, "")
        if not text:
            return False
        try:
            bt.parse_expiration(text)
        except bt.TokenError:
            return True
        return False

    async def _resync(self) -> None:
        while True:
            await asyncio.sleep(RESYNC_SECONDS)
            self.sign_queue.add(SIGNER_KEY)
            for e in self.secrets.list(names.NS_SYSTEM):
                if _is_token_secret(e):
                    self._track(e)

    async def _loop(self, queue, sync, what: str) -> None:
        while True:
            key = await queue.get()
            try:
                done = await sync(key)
            except st.ApiError as exc:
                log.warning("%s %s: %s", what, key, exc.message)
                done = False
            except Exception:  # noqa: BLE001 - keep the controller alive; retry the item
                log.exception("%s %s: sync failed", what, key)
                done = False
            if not done:
                queue.add_after(key, RETRY_DELAY)

    # --- bootstrap signer -----------------------------------------------------------
    def tokens(self) -> list[bt.TokenSecret]:
        out = []
        for e in self.secrets.list(names.NS_SYSTEM):
            if _is_token_secret(e):
                ts = _decode(e)
                if ts is not None:
                    out.append(ts)
        return out

    async def sync_cluster_info(self, _key: str) -> bool:
        content = self.kubeconfig()
        sigs = signatures(content, self.tokens(), _now())
        cached = self.configmaps.get(names.NS_PUBLIC, names.CLUSTER_INFO_CONFIGMAP)
        if cached is None:
            try:
                await self.signer_client.create(
                    self.cm_kind,
                    names.NS_PUBLIC,
                    {"metadata": {"name": names.CLUSTER_INFO_CONFIGMAP}, "data": desired_data(None, content, sigs)},
                )
                log.info("created %s/%s with %d signature(s)", names.NS_PUBLIC, names.CLUSTER_INFO_CONFIGMAP, len(sigs))
                return True
            except st.ApiError as exc:
                if exc.code != 409:
                    raise
        elif orjson.loads(cached.raw).get("data") == desired_data(orjson.loads(cached.raw).get("data"), content, sigs):
            return True
        changed = False

        def compute(cur: dict) -> dict:
            nonlocal changed
            want = desired_data(cur.get("data"), content, sigs)
            if cur.get("data") != want:
                cur["data"] = want
                changed = True
            return cur

        try:
            await self.signer_client.update(self.cm_kind, names.NS_PUBLIC, names.CLUSTER_INFO_CONFIGMAP, compute)
        except st.ApiError as exc:
            if exc.code == 404:
                return False  # deleted meanwhile: create it on the retry
            raise
        if changed:
            log.info("%s/%s signed for %d token(s)", names.NS_PUBLIC, names.CLUSTER_INFO_CONFIGMAP, len(sigs))
        return True

    # --- token cleaner --------------------------------------------------------------
    async def clean(self, name: str) -> bool:
        e = self.secrets.get(names.NS_SYSTEM, name)
        if e is None:
            return True
        obj = orjson.loads(e.raw)
        if obj.get("type") != names.BOOTSTRAP_TOKEN_SECRET_TYPE:
            return True
        ts = _decode(e)
        if ts is not None and not ts.expired(_now()):
            return True
        if ts is None and not self._bad_expiration(obj):
            return True
        try:
            await self.cleaner_client.delete(
                self.secret_kind, names.NS_SYSTEM, name, DeleteOptions(preconditions_uid=e.uid or None)
            )
        except st.ApiError as exc:
            if exc.code not in (404, 409):
                raise
            return True
        log.info("token cleaner: deleted expired bootstrap token secret %s/%s", names.NS_SYSTEM, name)
        return True
