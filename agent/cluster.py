"""The agent's side of a cluster: pods from the API server, their status, mirror pods.

* :class:`ApiPodSource` watches the pods bound to this node (``spec.nodeName``)
  through an informer and hands the set to the pod config merge as the ``api``
  source, the same pipeline the static sources feed. Mirror pods are not pods
  to run: they go to the mirror pod manager instead.
* :class:`StatusManager` writes pod status through the ``status`` sub-resource
  only when it changed, one writer per pod that always sends the newest
  version (an older status never overwrites a newer one); for static pods the
  status goes to their mirror pod. After a deleted API pod has been terminated
  it deletes the object with grace period 0, as upstream's final step of
  graceful deletion.
* :class:`MirrorPodManager` keeps one mirror pod per static pod (annotation
  ``orch.io/config.mirror`` = the static pod's hash, owner reference to the
  Node), re-creates it when it is deleted or out of date, and removes it when
  the static pod goes.
"""

from __future__ import annotations

import asyncio
import copy
import time
from typing import Any, Callable

from apiserver_min.api import names

from . import logging as agent_logging
from . import pods as podutil
from .pods import SOURCE_API, Op, PodUpdate

__all__ = ["ApiPodSource", "StatusManager", "MirrorPodManager", "ObjectCache", "is_mirror"]

log = agent_logging.get_logger("cluster")

STATUS_RETRY = 1.0


def is_mirror(pod: dict) -> bool:
    return names.ANNOTATION_CONFIG_MIRROR in podutil.annotations(pod)


def _pod_path(namespace: str, name: str, sub: str = "") -> str:
    path = f"/api/v1/namespaces/{namespace}/pods/{name}"
    return f"{path}/{sub}" if sub else path


class ApiPodSource:
    """Pods bound to this node, from a watch, as SET snapshots of the ``api`` source."""

    def __init__(
        self,
        client,
        node_name: str,
        config,
        *,
        mirrors: "MirrorPodManager | None" = None,
        informer_factory: Callable[..., Any] | None = None,
    ) -> None:
        from .client.informer import Informer

        self.client = client
        self.node_name = node_name
        self.config = config
        self.mirrors = mirrors
        factory = informer_factory or Informer
        self.informer = factory(
            client, "/api/v1/pods", params={"fieldSelector": f"spec.nodeName={node_name}"}, name="pods"
        )
        self.informer.add_handler(on_add=self._changed, on_update=self._changed, on_delete=self._changed)
        self._pending = asyncio.Event()

    def _changed(self, *objs: Any) -> None:
        self._pending.set()

    def snapshot(self) -> list[dict]:
        return [copy.deepcopy(p) for p in self.informer.cache.values() if not is_mirror(p)]

    def mirror_pods(self) -> dict[str, dict]:
        return {podutil.full_name(p): p for p in self.informer.cache.values() if is_mirror(p)}

    async def run(self) -> None:
        runner = asyncio.create_task(self.informer.run(), name="pod-informer")
        try:
            await self.informer.wait_synced()
            while True:
                if runner.done():
                    runner.result()
                self._pending.clear()
                self.config.push(PodUpdate.make(Op.SET, SOURCE_API, self.snapshot()))
                if self.mirrors is not None:
                    self.mirrors.observe(self.mirror_pods())
                await self._pending.wait()
                await asyncio.sleep(0.01)  # coalesce a burst of events into one SET
        finally:
            runner.cancel()
            await asyncio.gather(runner, return_exceptions=True)


class StatusManager:
    """Pod status to the API server, newest version only, one writer task per pod."""

    def __init__(self, client, *, mirrors: "MirrorPodManager | None" = None) -> None:
        self.client = client
        self.mirrors = mirrors
        self._latest: dict[str, tuple[int, dict, dict]] = {}  # uid -> (version, pod, status)
        self._sent: dict[str, int] = {}
        self._version = 0
        self._wake = asyncio.Event()
        self._delete: dict[str, dict] = {}  # uid -> pod to delete with grace 0
        self.sent_count = 0

    def set_status(self, pod: dict, status: dict) -> None:
        self._version += 1
        self._latest[podutil.uid(pod)] = (self._version, pod, copy.deepcopy(status))
        self._wake.set()

    def resend(self, pod: dict) -> None:
        """Send the pod's current status again (its mirror pod was re-created)."""
        self._sent.pop(podutil.uid(pod), None)
        self._wake.set()

    def terminated(self, pod: dict) -> None:
        """The pod's containers are gone: finish a graceful deletion (API pods only)."""
        uid = podutil.uid(pod)
        if podutil.is_static(pod):
            self._latest.pop(uid, None)
            if self.mirrors is not None:
                self.mirrors.static_gone(pod)
            return
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            self._delete[uid] = pod
            self._wake.set()
        else:
            self._latest.pop(uid, None)

    async def run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            for uid, (version, pod, status) in list(self._latest.items()):
                if self._sent.get(uid) == version:
                    continue
                if await self._send(pod, status):
                    self._sent[uid] = version
                else:
                    asyncio.get_running_loop().call_later(STATUS_RETRY, self._wake.set)
            for uid, pod in list(self._delete.items()):
                if await self._finish_delete(pod):
                    self._delete.pop(uid, None)
                    self._latest.pop(uid, None)
                    self._sent.pop(uid, None)
                else:
                    asyncio.get_running_loop().call_later(STATUS_RETRY, self._wake.set)

    async def _send(self, pod: dict, status: dict) -> bool:
        from .client.rest import ApiError

        target = pod
        if podutil.is_static(pod):
            if self.mirrors is None:
                return True
            target = self.mirrors.mirror_of(pod)
            if target is None:
                return False  # the mirror pod is not there yet; retry
        ns, name = podutil.namespace(target), podutil.name(target)
        body = {"metadata": {"uid": podutil.uid(target)}, "status": status}
        try:
            await self.client.patch(_pod_path(ns, name, "status"), body, patch_type="merge")
            self.sent_count += 1
            return True
        except ApiError as exc:
            if exc.status in (404, 409):
                # An API pod gone or replaced: nothing to report any more. A static pod's
                # mirror being re-created: report to the new one.
                return not podutil.is_static(pod)
            log.error("Failed to update pod status", pod=f"{name}_{ns}", err=exc.message)
            return False
        except OSError as exc:
            log.error("Failed to update pod status", pod=f"{name}_{ns}", err=exc)
            return False

    async def _finish_delete(self, pod: dict) -> bool:
        from .client.rest import ApiError

        ns, name = podutil.namespace(pod), podutil.name(pod)
        body = {
            "kind": "DeleteOptions",
            "apiVersion": "v1",
            "gracePeriodSeconds": 0,
            "preconditions": {"uid": podutil.uid(pod)},
        }
        try:
            await self.client.delete(_pod_path(ns, name), body=body)
            log.info("Deleted the pod object after termination", pod=f"{name}_{ns}")
            return True
        except ApiError as exc:
            if exc.status in (404, 409):
                return True
            log.error("Failed to delete the terminated pod", pod=f"{name}_{ns}", err=exc.message)
            return False
        except OSError as exc:
            log.error("Failed to delete the terminated pod", pod=f"{name}_{ns}", err=exc)
            return False


class MirrorPodManager:
    """One mirror pod in the API per static pod this agent runs."""

    def __init__(self, client, node_name: str, node_uid: Callable[[], str]) -> None:
        self.client = client
        self.node_name = node_name
        self.node_uid = node_uid
        self._static: dict[str, dict] = {}  # full name -> static pod
        self._mirrors: dict[str, dict] = {}  # full name -> mirror pod seen in the API
        self._wake = asyncio.Event()
        self.on_created: Callable[[dict], None] = lambda static_pod: None

    def static_pods(self, pods: list[dict]) -> None:
        self._static = {podutil.full_name(p): p for p in pods if podutil.is_static(p)}
        self._wake.set()

    def static_gone(self, pod: dict) -> None:
        self._static.pop(podutil.full_name(pod), None)
        self._wake.set()

    def observe(self, mirrors: dict[str, dict]) -> None:
        self._mirrors = mirrors
        self._wake.set()

    def mirror_of(self, pod: dict) -> dict | None:
        mirror = self._mirrors.get(podutil.full_name(pod))
        if mirror is None or (mirror.get("metadata") or {}).get("deletionTimestamp"):
            return None
        if podutil.annotations(mirror).get(names.ANNOTATION_CONFIG_MIRROR) != podutil.annotations(pod).get(
            names.ANNOTATION_CONFIG_HASH
        ):
            return None
        return mirror

    def mirror_body(self, pod: dict) -> dict:
        meta = pod.get("metadata") or {}
        annotations = dict(meta.get("annotations") or {})
        annotations[names.ANNOTATION_CONFIG_MIRROR] = annotations.get(names.ANNOTATION_CONFIG_HASH, "")
        body_meta = {
            "name": meta.get("name"),
            "namespace": podutil.namespace(pod),
            "labels": dict(meta.get("labels") or {}),
            "annotations": annotations,
        }
        uid = self.node_uid()
        if uid:
            body_meta["ownerReferences"] = [
                {"apiVersion": "v1", "kind": "Node", "name": self.node_name, "uid": uid, "controller": True}
            ]
        spec = copy.deepcopy(pod.get("spec") or {})
        spec["nodeName"] = self.node_name
        return {"apiVersion": "v1", "kind": "Pod", "metadata": body_meta, "spec": spec}

    async def run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                await self.reconcile()
            except Exception as exc:  # noqa: BLE001 - keep reconciling
                log.error("Mirror pod reconcile failed", err=exc)
                asyncio.get_running_loop().call_later(STATUS_RETRY, self._wake.set)

    async def reconcile(self) -> None:
        from .client.rest import ApiError

        for key, pod in list(self._static.items()):
            mirror = self._mirrors.get(key)
            ns, name = podutil.namespace(pod), podutil.name(pod)
            want = podutil.annotations(pod).get(names.ANNOTATION_CONFIG_HASH)
            if (
                mirror is not None
                and podutil.annotations(mirror).get(names.ANNOTATION_CONFIG_MIRROR) == want
                and not (mirror.get("metadata") or {}).get("deletionTimestamp")
            ):
                continue
            if mirror is not None:
                await self._delete(mirror)
                if not (mirror.get("metadata") or {}).get("deletionTimestamp"):
                    continue  # wait for the deletion to show up, then create
            try:
                # Known at once (the informer reports it a little later): the pod's status can
                # go to it now instead of after a retry.
                self._mirrors[key] = await self.client.create(f"/api/v1/namespaces/{ns}/pods", self.mirror_body(pod))
                log.info("Created mirror pod", pod=f"{name}_{ns}")
                self.on_created(pod)
            except ApiError as exc:
                if exc.status != 409:
                    log.error("Failed to create mirror pod", pod=f"{name}_{ns}", err=exc.message)
                    raise
        for key, mirror in list(self._mirrors.items()):
            if key not in self._static and not (mirror.get("metadata") or {}).get("deletionTimestamp"):
                await self._delete(mirror)

    async def _delete(self, mirror: dict) -> None:
        from .client.rest import ApiError

        ns, name = podutil.namespace(mirror), podutil.name(mirror)
        try:
            await self.client.delete(
                _pod_path(ns, name),
                body={
                    "kind": "DeleteOptions",
                    "apiVersion": "v1",
                    "gracePeriodSeconds": 0,
                    "preconditions": {"uid": podutil.uid(mirror)},
                },
            )
            log.info("Deleted mirror pod", pod=f"{name}_{ns}")
        except ApiError as exc:
            if exc.status not in (404, 409):
                raise


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

    def __init__(self, client, *, on_change: Callable[[str], None] | None = None, watch: bool = True) -> None:
        self.client = client
        self.on_change = on_change
        self.watch = watch
        self._objects: dict[tuple[str, str, str], dict | None] = {}
        self._tokens: dict[tuple[str, str, int], tuple[str, float, float]] = {}  # -> token, issued, exp
        self._refs: dict[tuple[str, str, str], set[str]] = {}  # object -> pod UIDs
        self._pod_refs: dict[str, set[tuple[str, str, str]]] = {}  # pod UID -> objects
        self._informers: dict[tuple[str, str, str], tuple[Any, asyncio.Task]] = {}

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
    def references(pod: dict) -> set[tuple[str, str]]:
        refs: set[tuple[str, str]] = set()
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
        for c in podutil.containers(pod) + podutil.init_containers(pod):
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
        from .client.rest import ApiError

        if podutil.is_static(pod):
            return
        ns = podutil.namespace(pod)
        uid = podutil.uid(pod)
        keys = {(kind, ns, name) for kind, name in self.references(pod)}
        self._track(uid, keys)
        for key in keys:
            watched = self._informers.get(key)
            if watched is not None and watched[0].synced:
                continue
            kind, _, name = key
            try:
                self._objects[key] = await self.client.get(f"{self._collection(kind, ns)}/{name}")
            except ApiError as exc:
                if exc.status != 404:
                    raise
                self._objects[key] = None
            self._start_watch(key)
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
        from .client.informer import Informer

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
