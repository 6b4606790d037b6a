"""ConfigMaps, Secrets and service-account tokens the node's pods reference, for volumes,
environment and image pulls."""

from __future__ import annotations

import asyncio
import time
from typing import Callable

from apiserver_min.api import names
from apiserver_min.api.persistentvolumes import ephemeral_claim_names

from . import logging as agent_logging
from . import pods as podutil
from .client.informer import Informer
from .client.rest import ApiClient, ApiError
from .runtime.volumes import KIND_CLAIM, KIND_VOLUME

__all__ = ["ObjectCache"]

_CLAIM_KINDS = (KIND_CLAIM, KIND_VOLUME)


def _claim_bound(claim: dict | None) -> bool:
    return bool(claim) and ((claim or {}).get("status") or {}).get("phase") == "Bound"


log = agent_logging.get_logger("objects")


class ObjectCache:
    """ConfigMaps, Secrets and service-account tokens the node's pods reference.

    The volume and environment builders are synchronous; before a pod's volumes
    are set up, :meth:`prefetch` reads what the pod references (the Node
    authorizer lets the node read exactly those objects) and asks the
    TokenRequest API for bound tokens; :meth:`get` and :meth:`token` then
    answer from here. Tokens are renewed at 80% of their lifetime when a pod's
    volumes are refreshed (every pod sync).

    Each referenced object is then watched (upstream's "Watch" change-detection
    strategy: a list + watch pinned to the one name with
    ``fieldSelector=metadata.name=``, which the Node authorizer treats as a
    read of that object), for as long as a pod on the node references it. A
    change calls :attr:`on_change` with the UIDs of the pods that reference the
    object, so that their volumes are brought up to date at once; while an
    object is watched, reading it costs no request.
    """

    def __init__(
        self, client: ApiClient, *, on_change: Callable[[str], None] | None = None, watch: bool = True
    ) -> None:
        self.client = client
        self.on_change = on_change
        self.watch = watch
        self._objects: dict[tuple[str, str, str], dict | None] = {}
        self._tokens: dict[tuple[str, str, int], tuple[str, float, float]] = {}  # -> token, issued, exp
        self._refs: dict[tuple[str, str, str], set[str]] = {}  # object -> pod UIDs
        self._pod_refs: dict[str, set[tuple[str, str, str]]] = {}  # pod UID -> objects
        self._informers: dict[tuple[str, str, str], tuple[Informer, asyncio.Task]] = {}

    def get(self, kind: str, namespace: str, name: str) -> dict | None:
        key = (kind, namespace, name)
        watched = self._informers.get(key)
        if watched is not None and watched[0].synced:
            return watched[0].cache.get(f"{namespace}/{name}")
        return self._objects.get(key)

    def token(self, pod: dict, projection: dict) -> str | None:
        entry = self._tokens.get(self._token_key(pod, projection))
        return entry[0] if entry else None

    @property
    def watched(self) -> set[tuple[str, str, str]]:
        return set(self._informers)

    @staticmethod
    def _token_key(pod: dict, projection: dict) -> tuple[str, str, int]:
        audience = projection.get("audience") or ""
        return (podutil.uid(pod), audience, int(projection.get("expirationSeconds") or 3600))

    @staticmethod
    def pull_secret_names(pod: dict) -> set[str]:
        return {
            ref["name"]
            for ref in podutil.spec(pod).get("imagePullSecrets") or []
            if isinstance(ref, dict) and isinstance(ref.get("name"), str) and ref["name"]
        }

    @staticmethod
    def references(pod: dict, *, pulls: bool = True) -> set[tuple[str, str]]:
        """(kind, name) of what the pod reads: its volumes' and environment's objects, and
        (``pulls``) its image pull secrets."""
        refs: set[tuple[str, str]] = {("Secret", n) for n in ObjectCache.pull_secret_names(pod)} if pulls else set()
        spec = podutil.spec(pod)
        for vol in spec.get("volumes") or []:
            if (vol.get("configMap") or {}).get("name"):
                refs.add(("ConfigMap", vol["configMap"]["name"]))
            if (vol.get("secret") or {}).get("secretName"):
                refs.add(("Secret", vol["secret"]["secretName"]))
            for src in (vol.get("projected") or {}).get("sources") or []:
                if (src.get("configMap") or {}).get("name"):
                    refs.add(("ConfigMap", src["configMap"]["name"]))
                if (src.get("secret") or {}).get("name"):
                    refs.add(("Secret", src["secret"]["name"]))
        for c in podutil.containers(pod) + podutil.init_containers(pod) + podutil.ephemeral_containers(pod):
            for env in c.get("env") or []:
                vf = env.get("valueFrom") or {}
                if (vf.get("configMapKeyRef") or {}).get("name"):
                    refs.add(("ConfigMap", vf["configMapKeyRef"]["name"]))
                if (vf.get("secretKeyRef") or {}).get("name"):
                    refs.add(("Secret", vf["secretKeyRef"]["name"]))
            for env_from in c.get("envFrom") or []:
                if (env_from.get("configMapRef") or {}).get("name"):
                    refs.add(("ConfigMap", env_from["configMapRef"]["name"]))
                if (env_from.get("secretRef") or {}).get("name"):
                    refs.add(("Secret", env_from["secretRef"]["name"]))
        return refs

    @staticmethod
    def _collection(kind: str, namespace: str) -> str:
        plural = "configmaps" if kind == "ConfigMap" else "secrets"
        return f"/api/v1/namespaces/{namespace}/{plural}"

    async def prefetch(self, pod: dict) -> None:

        if podutil.is_static(pod):
            return
        ns = podutil.namespace(pod)
        uid = podutil.uid(pod)
        keys = {(kind, ns, name) for kind, name in self.references(pod)}
        # Secrets only the image pulls use: a failure to read one is the pull's warning event,
        # never a reason to hold the pod back (as upstream).
        only_pulls = {("Secret", ns, n) for n in self.pull_secret_names(pod)} - {
            (kind, ns, name) for kind, name in self.references(pod, pulls=False)
        }
        # Claims and volumes known from earlier syncs stay tracked until re-read below.
        self._track(uid, keys | {k for k in self._pod_refs.get(uid, ()) if k[0] in _CLAIM_KINDS})
        for key in keys:
            watched = self._informers.get(key)
            if watched is not None and watched[0].synced:
                continue
            kind, _, name = key
            try:
                self._objects[key] = await self.client.get(f"{self._collection(kind, ns)}/{name}")
            except ApiError as exc:
                if exc.status != 404 and key not in only_pulls:
                    raise
                if exc.status != 404:
                    log.info("Unable to read an image pull secret", namespace=ns, name=name, err=exc.message)
                self._objects[key] = None
            self._start_watch(key)
        await self._prefetch_claims(pod, ns, uid, keys)
        sa = podutil.spec(pod).get("serviceAccountName") or "default"
        for vol in podutil.spec(pod).get("volumes") or []:
            for src in (vol.get("projected") or {}).get("sources") or []:
                projection = src.get("serviceAccountToken")
                if projection is None:
                    continue
                key = self._token_key(pod, projection)
                entry = self._tokens.get(key)
                now = time.time()
                if entry and now < entry[1] + 0.8 * (entry[2] - entry[1]):
                    continue
                body = {
                    "apiVersion": f"{names.AUTHENTICATION_GROUP}/v1",
                    "kind": "TokenRequest",
                    "spec": {
                        "audiences": [projection["audience"]] if projection.get("audience") else [],
                        "expirationSeconds": key[2],
                        "boundObjectRef": {
                            "apiVersion": "v1",
                            "kind": "Pod",
                            "name": podutil.name(pod),
                            "uid": podutil.uid(pod),
                        },
                    },
                }
                reply = await self.client.create(f"/api/v1/namespaces/{ns}/serviceaccounts/{sa}/token", body)
                token = (reply.get("status") or {}).get("token", "")
                if token:
                    self._tokens[key] = (token, now, now + key[2])

    async def _prefetch_claims(self, pod: dict, ns: str, uid: str, keys: set[tuple[str, str, str]]) -> None:
        """The pod's PersistentVolumeClaims and their volumes. The Node authorizer lets a
        node get (not watch) exactly these, so a claim is read again on every sync until it
        is bound; a bound claim and its volume are kept while pods use them."""
        claims = [
            (v.get("persistentVolumeClaim") or {}).get("claimName")
            for v in podutil.spec(pod).get("volumes") or []
            if (v.get("persistentVolumeClaim") or {}).get("claimName")
        ] + sorted(ephemeral_claim_names(pod))
        claim_keys: set[tuple[str, str, str]] = set()
        for claim_name in claims:
            key = (KIND_CLAIM, ns, claim_name)
            claim_keys.add(key)
            claim = self._objects.get(key)
            if claim is None or not _claim_bound(claim):
                claim = await self._get_or_none(f"/api/v1/namespaces/{ns}/persistentvolumeclaims/{claim_name}")
                self._objects[key] = claim
            volume_name = ((claim or {}).get("spec") or {}).get("volumeName") if _claim_bound(claim) else ""
            if volume_name:
                vkey = (KIND_VOLUME, "", volume_name)
                claim_keys.add(vkey)
                if self._objects.get(vkey) is None:
                    self._objects[vkey] = await self._get_or_none(f"/api/v1/persistentvolumes/{volume_name}")
        self._track(uid, keys | claim_keys)

    async def _get_or_none(self, path: str) -> dict | None:
        try:
            return await self.client.get(path)
        except ApiError as exc:
            if exc.status != 404:
                raise
            return None

    # --- watches of referenced objects ----------------------------------------------------

    def _track(self, uid: str, keys: set[tuple[str, str, str]]) -> None:
        """Record which objects the pod references now; unwatch what nobody references."""
        old = self._pod_refs.get(uid, set())
        for key in old - keys:
            self._drop_ref(key, uid)
        for key in keys:
            self._refs.setdefault(key, set()).add(uid)
        if keys:
            self._pod_refs[uid] = set(keys)
        else:
            self._pod_refs.pop(uid, None)

    def _drop_ref(self, key: tuple[str, str, str], uid: str) -> None:
        users = self._refs.get(key)
        if users is None:
            return
        users.discard(uid)
        if users:
            return
        del self._refs[key]
        self._objects.pop(key, None)
        watched = self._informers.pop(key, None)
        if watched is not None:
            watched[1].cancel()
            log.v(3).info("Stopped watching a referenced object", kind=key[0], namespace=key[1], name=key[2])

    def _start_watch(self, key: tuple[str, str, str]) -> None:
        if not self.watch or key in self._informers:
            return

        kind, ns, name = key
        informer = Informer(
            self.client,
            self._collection(kind, ns),
            params={"fieldSelector": f"metadata.name={name}"},
            name=f"{kind.lower()} {ns}/{name}",
        )

        def changed(*_objs: dict) -> None:
            if not informer.synced:
                return  # the first list: what prefetch read already
            log.v(2).info("Referenced object changed", kind=kind, namespace=ns, name=name)
            for uid in sorted(self._refs.get(key, ())):
                if self.on_change is not None:
                    self.on_change(uid)

        informer.add_handler(changed, changed, changed)
        task = asyncio.ensure_future(informer.run())
        self._informers[key] = (informer, task)
        log.v(3).info("Watching a referenced object", kind=kind, namespace=ns, name=name)

    async def close(self) -> None:
        tasks = [t for _, t in self._informers.values()]
        self._informers.clear()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def forget(self, pod_uid: str) -> None:
        """The pod is gone from the node: its tokens, and watches only it needed."""
        for key in [k for k in self._tokens if k[0] == pod_uid]:
            del self._tokens[key]
        for key in self._pod_refs.pop(pod_uid, set()):
            self._drop_ref(key, pod_uid)
