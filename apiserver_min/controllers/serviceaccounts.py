"""The service-account controller: a ``default`` account and the root CA ConfigMap
in every active namespace."""

from __future__ import annotations

import logging

from ..api import names
from ..api import status as st
from ..api.kinds import KindInfo
from ..client.informer import InformerFactory
from ..client.interface import Client
from ..storage.cacher import CacheEvent, Entry
from .queue import RETRY_DELAY, KeyQueue

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
    ConfigMap is changed.

    Two identities, as upstream's two controllers: ``sa_client`` (the
    service-account-controller) creates ServiceAccounts, ``ca_client`` (the
    root-ca-cert-publisher) writes the ConfigMaps."""

    def __init__(self, sa_client: Client, ca_client: Client, informers: InformerFactory, ca_file: str):
        self.sa_client = sa_client
        self.ca_client = ca_client
        self.ns_kind = informers.kind("", "v1", "namespaces")
        self.sa_kind = informers.kind("", "v1", "serviceaccounts")
        self.cm_kind = informers.kind("", "v1", "configmaps")
        self.namespaces = informers.for_kind(self.ns_kind)
        self.service_accounts = informers.for_kind(self.sa_kind)
        self.configmaps = informers.for_kind(self.cm_kind)
        self.ca_file = ca_file
        self._ca_pem: str | None = None
        self.queue = KeyQueue()

    def start(self) -> None:
        self.namespaces.add_handler(self.on_namespace)
        self.service_accounts.add_handler(self.on_service_account)
        self.configmaps.add_handler(self.on_configmap)

    def ca_pem(self) -> str:
        if self._ca_pem is None:
            with open(self.ca_file, encoding="ascii") as f:
                self._ca_pem = f.read()
        return self._ca_pem

    def on_namespace(self, ev: CacheEvent | None) -> None:
        if ev is None:
            for e in self.namespaces.list():
                if not e.deleting:
                    self.queue.add(e.name)
        elif ev.type != "DELETED" and not ev.entry.deleting:
            self.queue.add(ev.entry.name)

    def on_service_account(self, ev: CacheEvent | None) -> None:
        if ev is not None and ev.type == "DELETED" and ev.entry.name == names.DEFAULT_SERVICE_ACCOUNT:
            self.queue.add(ev.entry.namespace)

    def on_configmap(self, ev: CacheEvent | None) -> None:
        if ev is not None and ev.entry.name == names.ROOT_CA_CONFIGMAP and ev.type in ("DELETED", "MODIFIED"):
            self.queue.add(ev.entry.namespace)

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

    async def sync(self, ns: str) -> bool:
        """True when done (or nothing to do); False to retry later."""
        entry = self.namespaces.get("", ns)
        if entry is None or entry.deleting:
            return True
        await self._create(
            self.sa_client,
            self.sa_kind,
            ns,
            {"metadata": {"name": names.DEFAULT_SERVICE_ACCOUNT}},
            self.service_accounts.get(ns, names.DEFAULT_SERVICE_ACCOUNT),
        )
        data = {"ca.crt": self.ca_pem()}
        cm = self.configmaps.get(ns, names.ROOT_CA_CONFIGMAP)
        if cm is None:
            await self._create(
                self.ca_client,
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
            await self.ca_client.update(self.cm_kind, ns, names.ROOT_CA_CONFIGMAP, fix)
        except st.ApiError as exc:
            if exc.code not in (403, 404):
                raise
        return True

    async def _create(self, client: Client, kind: KindInfo, ns: str, obj: dict, cached: Entry | None) -> None:
        if cached is not None:
            return
        try:
            await client.create(kind, ns, obj)
            log.info("created %s %s/%s", kind.kind, ns, obj["metadata"]["name"])
        except st.ApiError as exc:
            # 409: already there (the cache lagged); 403/404: the namespace is going away.
            if exc.code not in (409, 403, 404):
                raise
