"""The service-account controller: a ``default`` account and the root CA ConfigMap
in every active namespace."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from ..api import names
from ..api import status as st
from ..api.user import SYSTEM_USER
from ..storage.keys import key_prefix
from .queue import RETRY_DELAY, KeyQueue

if TYPE_CHECKING:
    from ..api.kinds import KindInfo
    from ..storage.cacher import CacheEvent, ResourceCache

log = logging.getLogger("orch-apiserver.serviceaccounts")


ROOT_CA_DESCRIPTION = (
    "Contains a CA bundle that can be used to verify the orch-apiserver when using internal "
    "endpoints such as the internal service IP or orch.default.svc. No other usage is "
    "guaranteed across distributions."
)


class ServiceAccountsController:
    """Keeps a ``default`` ServiceAccount and the ``orch-root-ca.crt`` ConfigMap (key
    ``ca.crt``: the cluster CA) in every active namespace, as upstream's
    serviceaccount controller and root-ca-cert-publisher do: on namespace creation,
    at start for every namespace, and again when either object is deleted or the
    ConfigMap is changed."""

    def __init__(self, server: Any, ca_file: str | None = None):

        self.server = server
        self.store = server.store
        reg = server.registry
        self.ns_kind = reg.by_resource("", "v1", "namespaces")
        self.sa_kind = reg.by_resource("", "v1", "serviceaccounts")
        self.cm_kind = reg.by_resource("", "v1", "configmaps")
        self.ns_prefix, self.sa_prefix, self.cm_prefix = (
            key_prefix(self.ns_kind),
            key_prefix(self.sa_kind),
            key_prefix(self.cm_kind),
        )
        self.ca_file = ca_file
        self._ca_pem: str | None = None
        self.queue = KeyQueue()

    def ca_pem(self) -> str:
        if self._ca_pem is None:
            path = self.ca_file or self.server.pki.ca_cert
            with open(path, encoding="ascii") as f:
                self._ca_pem = f.read()
        return self._ca_pem

    def on_event(self, cache: "ResourceCache | None", ev: "CacheEvent | None") -> None:
        if cache is None:
            for e in self.server.cache.cache(self.ns_prefix).items.values():
                if not e.deleting:
                    self.queue.add(e.name)
            return
        e = ev.entry
        if cache.prefix == self.ns_prefix:
            if ev.type != "DELETED" and not e.deleting:
                self.queue.add(e.name)
        elif cache.prefix == self.sa_prefix:
            if ev.type == "DELETED" and e.name == names.DEFAULT_SERVICE_ACCOUNT:
                self.queue.add(e.namespace)
        elif cache.prefix == self.cm_prefix:
            if e.name == names.ROOT_CA_CONFIGMAP and ev.type in ("DELETED", "MODIFIED"):
                self.queue.add(e.namespace)

    async def run(self) -> None:
        while True:
            ns = await self.queue.get()
            try:
                done = await self.sync(ns)
            except st.ApiError as exc:
                log.warning("namespace %s: %s", ns, exc.message)
                done = False
            except Exception:  # noqa: BLE001 - keep the controller alive; retry the item
                log.exception("namespace %s: service account sync failed", ns)
                done = False
            if not done:
                self.queue.add_after(ns, RETRY_DELAY)

    def _cached(self, prefix: str, key: str):
        return self.server.cache.cache(prefix).items.get(key)

    async def sync(self, ns: str) -> bool:
        """True when done (or nothing to do); False to retry later."""
        entry = self._cached(self.ns_prefix, f"{self.ns_prefix}{ns}")
        if entry is None or entry.deleting:
            return True
        await self._create(
            self.sa_kind,
            ns,
            {"metadata": {"name": names.DEFAULT_SERVICE_ACCOUNT}},
            self._cached(self.sa_prefix, f"{self.sa_prefix}{ns}/{names.DEFAULT_SERVICE_ACCOUNT}"),
        )
        data = {"ca.crt": self.ca_pem()}
        cm = self._cached(self.cm_prefix, f"{self.cm_prefix}{ns}/{names.ROOT_CA_CONFIGMAP}")
        if cm is None:
            await self._create(
                self.cm_kind,
                ns,
                {
                    "metadata": {
                        "name": names.ROOT_CA_CONFIGMAP,
                        "annotations": {names.ANNOTATION_DESCRIPTION: ROOT_CA_DESCRIPTION},
                    },
                    "data": data,
                },
                None,
            )
            return True
        obj = cm.object()
        if obj.get("data") == data and ((obj.get("metadata") or {}).get("annotations") or {}).get(
            names.ANNOTATION_DESCRIPTION
        ):
            return True

        def fix(current: dict) -> dict:
            current["data"] = dict(data)
            current.pop("binaryData", None)
            current["metadata"].setdefault("annotations", {})[names.ANNOTATION_DESCRIPTION] = ROOT_CA_DESCRIPTION
            return current

        try:
            await self.store.update(
                self.cm_kind,
                ns,
                names.ROOT_CA_CONFIGMAP,
                fix,
                SYSTEM_USER,
                field_manager=names.CONTROLLER_MANAGER_FIELD_MANAGER,
            )
        except st.ApiError as exc:
            if exc.code not in (403, 404):
                raise
        return True

    async def _create(self, kind: "KindInfo", ns: str, obj: dict, cached: Any) -> None:
        if cached is not None:
            return
        try:
            await self.store.create(kind, ns, obj, SYSTEM_USER, field_manager=names.CONTROLLER_MANAGER_FIELD_MANAGER)
            log.info("created %s %s/%s", kind.kind, ns, obj["metadata"]["name"])
        except st.ApiError as exc:
            # 409: already there (the cache lagged); 403/404: the namespace is going away.
            if exc.code not in (409, 403, 404):
                raise
