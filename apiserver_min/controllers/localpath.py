"""The bundled local-path provisioner (k3s's, in this project's words): node-local
directories as persistent volumes.

At start it creates the StorageClass ``local-path`` (provisioner ``orch.io/local-path``,
``WaitForFirstConsumer``, reclaim ``Delete``, annotated as the default class) when no
class of that name exists; a class an operator made or edited is left as it is.

Provisioning: a claim handed to ``orch.io/local-path`` by the binder
(``volume.orch.io/storage-provisioner``) whose node the scheduler chose
(``volume.orch.io/selected-node``) gets the volume ``pvc-<claim uid>``: a ``hostPath``
volume (type ``DirectoryOrCreate``) at ``<dir>/pvc-<claim uid>_<namespace>_<claim>``,
with a required node affinity pinning it to that node (its ``orch.io/hostname`` label,
or its name), the claim's requested size and access modes, the class's reclaim policy,
``claimRef`` naming the claim (so the binder binds exactly these two) and
``pv.orch.io/provisioned-by: orch.io/local-path``. Events ``Provisioning`` and
``ProvisioningSucceeded`` (``ProvisioningFailed`` with the reason otherwise) go to the
claim. What this provisioner cannot honour is refused, never ignored: class
``parameters`` and ``mountOptions``, a class's ``allowedTopologies``, a claim
``selector`` or ``dataSource``, block volume mode, and a class in ``Immediate`` mode
(there is no node to put the directory on).

The directory itself is made on the node, not here (the API server is in general not
on that node): the node agent creates it, mode 0777, when it first mounts the volume.

Deletion: a volume of this provisioner that the binder marked ``Released`` with reclaim
policy ``Delete`` (or that was deleted by hand and is not bound: such volumes carry the
finalizer ``external-provisioner.volume.orch.io/finalizer`` until their directory is
gone, as upstream's external provisioners do) has its directory removed by a helper pod, as k3s does it: the pod
``helper-pod-delete-<volume>`` in ``orch-system``, bound straight to the volume's node
(``spec.nodeName``, tolerating every taint), mounts the provisioner's directory and runs
``rm -rf`` on the volume's directory only. The node agent runs it like any pod: no new
permission for nodes, and it works for nodes that joined from elsewhere. When the helper
pod has succeeded it is deleted and so is the volume; when it failed the volume stays
(event ``VolumeFailedDelete``) and a new helper pod is tried after a back-off. A volume
whose node is gone from the cluster is deleted without a helper (its directory cannot be
reached). A path outside the provisioner's directory is never removed: such a volume is
marked ``Failed``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import posixpath
from typing import Mapping

from ..api import names
from ..api import persistentvolumes as pvs
from ..api import status as st
from ..api.helpers import dict_at, object_reference
from ..client.events import EventRecorder
from ..client.informer import InformerFactory
from ..client.interface import Client, DeleteOptions
from ..storage.cacher import CacheEvent
from .protection import remove_finalizer
from .queue import RateLimitedQueue, run_worker

log = logging.getLogger("orch-apiserver.controllers.localpath")

HELPER_CONTAINER = "helper-pod"
HELPER_MOUNT = "/data"


class ProvisioningRefused(Exception):
    """A claim or class asks for what this provisioner cannot do (the event's message)."""


def default_storage_class() -> dict:
    """The class created at start when absent."""
    return {
        "apiVersion": f"{names.STORAGE_GROUP}/v1",
        "kind": "StorageClass",
        "metadata": {
            "name": names.LOCAL_PATH_STORAGE_CLASS,
            "annotations": {names.ANNOTATION_DEFAULT_STORAGE_CLASS: "true"},
        },
        "provisioner": names.LOCAL_PATH_PROVISIONER,
        "reclaimPolicy": "Delete",
        "volumeBindingMode": pvs.VOLUME_BINDING_WAIT,
    }


def volume_name(claim: Mapping) -> str:
    return f"pvc-{dict_at(claim, 'metadata').get('uid', '')}"


def volume_path(base_dir: str, claim: Mapping) -> str:
    """``<dir>/pvc-<uid>_<namespace>_<name>`` (k3s's layout)."""
    md = dict_at(claim, "metadata")
    return posixpath.join(base_dir, f"pvc-{md.get('uid', '')}_{md.get('namespace', '')}_{md.get('name', '')}")


def node_affinity(node: Mapping) -> dict:
    """A required node affinity that only ``node`` satisfies."""
    md = dict_at(node, "metadata")
    hostname = (md.get("labels") or {}).get(names.LABEL_HOSTNAME)
    if hostname:
        term = {"matchExpressions": [{"key": names.LABEL_HOSTNAME, "operator": "In", "values": [hostname]}]}
    else:
        term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [md.get("name", "")]}]}
    return {"required": {"nodeSelectorTerms": [term]}}


def check_provisionable(claim: Mapping, storage_class: Mapping) -> None:
    """ProvisioningRefused naming what this provisioner does not do."""
    spec = dict_at(claim, "spec")
    if storage_class.get("parameters"):
        keys = ", ".join(sorted(storage_class["parameters"]))
        raise ProvisioningRefused(f"{names.LOCAL_PATH_PROVISIONER} takes no class parameters (given: {keys})")
    if storage_class.get("mountOptions"):
        raise ProvisioningRefused(f"{names.LOCAL_PATH_PROVISIONER} volumes cannot take mountOptions")
    if storage_class.get("allowedTopologies"):
        raise ProvisioningRefused(f"{names.LOCAL_PATH_PROVISIONER} does not support allowedTopologies")
    if spec.get("selector") is not None:
        raise ProvisioningRefused("claim Selector is not supported")
    if spec.get("dataSource") is not None or spec.get("dataSourceRef") is not None:
        raise ProvisioningRefused(f"{names.LOCAL_PATH_PROVISIONER} cannot fill a volume from a dataSource")
    if pvs.volume_mode(spec) != "Filesystem":
        raise ProvisioningRefused(f"{names.LOCAL_PATH_PROVISIONER} provides only Filesystem volumes")
    if pvs.class_binding_mode(storage_class) != pvs.VOLUME_BINDING_WAIT:
        raise ProvisioningRefused(
            "configuration error, no node was specified: "
            f"{names.LOCAL_PATH_PROVISIONER} needs volumeBindingMode WaitForFirstConsumer"
        )
    if not pvs.access_modes(claim):
        raise ProvisioningRefused("the claim names no accessModes")


def build_volume(claim: Mapping, storage_class: Mapping, node: Mapping, base_dir: str) -> dict:
    """The volume for ``claim`` on ``node`` (see the module text)."""
    spec = dict_at(claim, "spec")
    requests = dict_at(dict_at(spec, "resources"), "requests")
    policy = storage_class.get("reclaimPolicy") or "Delete"
    metadata: dict = {
        "name": volume_name(claim),
        "annotations": {names.ANNOTATION_PROVISIONED_BY: names.LOCAL_PATH_PROVISIONER},
    }
    if policy == "Delete":
        metadata["finalizers"] = [names.FINALIZER_PROVISIONER]
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": metadata,
        "spec": {
            "capacity": {"storage": str(requests.get("storage") or "0")},
            "accessModes": list(pvs.access_modes(claim)),
            "persistentVolumeReclaimPolicy": policy,
            "storageClassName": dict_at(storage_class, "metadata").get("name", ""),
            "volumeMode": "Filesystem",
            "claimRef": pvs.claim_ref(claim),
            "hostPath": {"path": volume_path(base_dir, claim), "type": "DirectoryOrCreate"},
            "nodeAffinity": node_affinity(node),
        },
    }


def volume_node(volume: Mapping) -> str:
    """The node a local-path volume is pinned to (what :func:`node_affinity` wrote)."""
    terms = dict_at(dict_at(dict_at(volume, "spec"), "nodeAffinity"), "required").get("nodeSelectorTerms") or []
    for term in terms if isinstance(terms, list) else ():
        for part in ("matchFields", "matchExpressions"):
            for expr in (term or {}).get(part) or []:
                values = expr.get("values") or []
                if expr.get("operator") == "In" and len(values) == 1:
                    return str(values[0])
    return ""


def helper_pod(volume: Mapping, node: str, base_dir: str, image: str) -> dict:
    """The pod that removes a released volume's directory on its node."""
    name = str(dict_at(volume, "metadata").get("name") or "")
    path = str(dict_at(dict_at(volume, "spec"), "hostPath").get("path") or "")
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": names.LOCAL_PATH_HELPER_POD_PREFIX + name,
            "namespace": names.NS_SYSTEM,
            "labels": {names.LABEL_LOCAL_PATH_HELPER: name},
        },
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "tolerations": [{"operator": "Exists"}],
            "containers": [
                {
                    "name": HELPER_CONTAINER,
                    "image": image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["rm", "-rf", posixpath.join(HELPER_MOUNT, posixpath.basename(path))],
                    "volumeMounts": [{"name": "data", "mountPath": HELPER_MOUNT}],
                }
            ],
            "volumes": [{"name": "data", "hostPath": {"path": base_dir, "type": "DirectoryOrCreate"}}],
        },
    }


def path_is_ours(volume: Mapping, base_dir: str) -> bool:
    """The volume's directory is ``<dir>/pvc-...`` exactly (nothing else is ever removed)."""
    path = str(dict_at(dict_at(volume, "spec"), "hostPath").get("path") or "")
    norm = posixpath.normpath(path) if path else ""
    return posixpath.dirname(norm) == posixpath.normpath(base_dir) and posixpath.basename(norm).startswith("pvc-")


class LocalPathProvisioner:
    def __init__(
        self,
        client: Client,
        informers: InformerFactory,
        *,
        base_dir: str = names.LOCAL_PATH_DIR,
        helper_image: str = names.LOCAL_PATH_HELPER_IMAGE,
    ):
        if not os.path.isabs(base_dir):
            raise ValueError(f"--local-path-dir must be an absolute path, not {base_dir!r}")
        self.client = client
        self.base_dir = posixpath.normpath(base_dir)
        self.helper_image = helper_image
        self.pv_kind = informers.kind("", "v1", "persistentvolumes")
        self.pvc_kind = informers.kind("", "v1", "persistentvolumeclaims")
        self.sc_kind = informers.kind(names.STORAGE_GROUP, "v1", "storageclasses")
        self.pod_kind = informers.kind("", "v1", "pods")
        self.volumes = informers.for_kind(self.pv_kind)
        self.claims = informers.for_kind(self.pvc_kind)
        self.classes = informers.for_kind(self.sc_kind)
        self.nodes = informers.for_resource("", "v1", "nodes")
        self.pods = informers.for_kind(self.pod_kind)
        self.events = EventRecorder(client, informers.registry, names.LOCAL_PATH_PROVISIONER)
        self.queue = RateLimitedQueue(max_delay=60.0)
        # Volumes this provisioner deleted whose deletion the cache has not shown yet:
        # a stale copy must not start another helper pod.
        self._deleted: set[str] = set()

    async def ensure_default_class(self) -> None:
        """The ``local-path`` class, unless a class of that name exists."""
        if self.classes.get("", names.LOCAL_PATH_STORAGE_CLASS) is not None:
            return
        try:
            await self.client.create(self.sc_kind, "", default_storage_class())
            log.info("created the default StorageClass %s", names.LOCAL_PATH_STORAGE_CLASS)
        except st.ApiError as exc:
            if exc.code != 409:
                raise

    def start(self) -> None:
        self.claims.add_handler(self.on_claim)
        self.volumes.add_handler(self.on_volume)
        self.pods.add_handler(self.on_pod)

    def on_claim(self, ev: CacheEvent | None) -> None:
        if ev is None:
            for e in self.claims.list():
                self.queue.add(("pvc", e.namespace, e.name))
        elif ev.type != "DELETED":
            self.queue.add(("pvc", ev.entry.namespace, ev.entry.name))

    def on_volume(self, ev: CacheEvent | None) -> None:
        if ev is None:
            for e in self.volumes.list():
                self.queue.add(("pv", "", e.name))
        elif ev.type == "DELETED":
            self._deleted.discard(ev.entry.uid)
        else:
            self.queue.add(("pv", "", ev.entry.name))

    def on_pod(self, ev: CacheEvent | None) -> None:
        if ev is None or ev.entry.namespace != names.NS_SYSTEM:
            return
        volume = ev.entry.labels.get(names.LABEL_LOCAL_PATH_HELPER)
        if volume:
            self.queue.add(("pv", "", volume))

    async def run(self) -> None:
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self._default_class_until_done(), name="local-path-default-class")
            tg.create_task(run_worker(self.queue, self.sync, log, "local-path item"), name="local-path-provisioner")

    async def _default_class_until_done(self) -> None:
        """:meth:`ensure_default_class`, retried (1 s doubling to 30 s) until it lands."""
        delay = 1.0
        while True:
            try:
                await self.ensure_default_class()
                return
            except st.ApiError as exc:
                log.warning("cannot create the default StorageClass yet: %s (retrying in %.0fs)", exc.message, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 30.0)

    async def sync(self, key: tuple[str, str, str]) -> None:
        what, namespace, name = key
        if what == "pvc":
            entry = self.claims.get(namespace, name)
            if entry is not None:
                await self.sync_claim(entry.object())
        else:
            entry = self.volumes.get("", name)
            if entry is not None:
                await self.sync_volume(entry.object())

    # --- provisioning ------------------------------------------------------------------
    async def sync_claim(self, claim: dict) -> None:
        ann = pvs.annotations_of(claim)
        if ann.get(names.ANNOTATION_STORAGE_PROVISIONER) != names.LOCAL_PATH_PROVISIONER and (
            ann.get(names.ANNOTATION_STORAGE_PROVISIONER_BETA) != names.LOCAL_PATH_PROVISIONER
        ):
            return
        if dict_at(claim, "spec").get("volumeName") or pvs.being_deleted(claim):
            return
        if self.volumes.get("", volume_name(claim)) is not None:
            return  # made already; the binder binds it
        ref = object_reference(claim, "PersistentVolumeClaim")
        ns, name = pvs.claim_key(claim)
        class_name = pvs.claim_class(claim)
        class_entry = self.classes.get("", class_name) if class_name else None
        if class_entry is None:
            await self._refused(ref, f'storageclass.{names.STORAGE_GROUP} "{class_name}" not found')
            return
        storage_class = class_entry.object()
        if storage_class.get("provisioner") != names.LOCAL_PATH_PROVISIONER:
            return
        try:
            check_provisionable(claim, storage_class)
        except ProvisioningRefused as exc:
            await self._refused(ref, str(exc))
            return
        node_name = ann.get(names.ANNOTATION_SELECTED_NODE) or ""
        if not node_name:
            return  # the scheduler has not chosen a node yet
        node = self.nodes.get("", node_name)
        if node is None:
            # Give the choice back to the scheduler (upstream's rescheduling of a claim).
            await self._refused(ref, f'node "{node_name}" not found')
            await self._forget_selected_node(claim)
            return
        await self.events.record(
            ref, "Normal", "Provisioning", f'External provisioner is provisioning volume for claim "{ns}/{name}"'
        )
        volume = build_volume(claim, storage_class, node.object(), self.base_dir)
        try:
            await self.client.create(self.pv_kind, "", volume)
        except st.ApiError as exc:
            if exc.code == 409:
                return  # made by an earlier sync the cache had not shown yet
            await self._refused(ref, exc.message)
            raise
        log.info(
            "provisioned volume %s for claim %s/%s on node %s at %s",
            volume["metadata"]["name"],
            ns,
            name,
            node_name,
            volume["spec"]["hostPath"]["path"],
        )
        await self.events.record(
            ref, "Normal", "ProvisioningSucceeded", f"Successfully provisioned volume {volume['metadata']['name']}"
        )

    async def _forget_selected_node(self, claim: dict) -> None:
        ns, name = pvs.claim_key(claim)
        uid = dict_at(claim, "metadata").get("uid")

        def drop(obj: dict) -> dict:
            ann = dict_at(obj, "metadata").get("annotations")
            if dict_at(obj, "metadata").get("uid") == uid and isinstance(ann, dict):
                ann.pop(names.ANNOTATION_SELECTED_NODE, None)
            return obj

        try:
            await self.client.update(self.pvc_kind, ns, name, drop)
        except st.ApiError as exc:
            if exc.code != 404:
                raise

    async def _refused(self, ref: dict, message: str) -> None:
        log.info("claim %s/%s not provisioned: %s", ref.get("namespace"), ref.get("name"), message)
        await self.events.record(ref, "Warning", "ProvisioningFailed", message)

    # --- deletion ----------------------------------------------------------------------
    async def sync_volume(self, volume: dict) -> None:
        if pvs.annotations_of(volume).get(names.ANNOTATION_PROVISIONED_BY) != names.LOCAL_PATH_PROVISIONER:
            return
        spec = dict_at(volume, "spec")
        phase = dict_at(volume, "status").get("phase")
        # Released with Delete; or deleted by hand and not bound (kept by our finalizer).
        deleted_by_hand = pvs.being_deleted(volume) and names.FINALIZER_PROVISIONER in _finalizers(volume)
        if spec.get("persistentVolumeReclaimPolicy") != "Delete" or phase == pvs.VOLUME_BOUND:
            return
        if phase != pvs.VOLUME_RELEASED and not deleted_by_hand:
            return
        name = str(dict_at(volume, "metadata").get("name") or "")
        uid = str(dict_at(volume, "metadata").get("uid") or "")
        if uid in self._deleted:
            return
        ref = object_reference(volume, "PersistentVolume")
        if not path_is_ours(volume, self.base_dir):
            message = (
                f"refusing to delete the directory of volume {name}: its hostPath is not a pvc-* directory "
                f"of {self.base_dir}"
            )
            await self.events.record(ref, "Warning", "VolumeFailedDelete", message)
            await self._volume_failed(volume, message)
            return
        node = volume_node(volume)
        if not node or self._node_entry(node) is None:
            log.warning(
                "volume %s: its node %r is gone; deleting the volume without removing its directory", name, node
            )
            await self._delete_volume(name, uid)
            return
        helper_name = names.LOCAL_PATH_HELPER_POD_PREFIX + name
        helper = self.pods.get(names.NS_SYSTEM, helper_name)
        if helper is None:
            pod = helper_pod(volume, self._node_entry(node) or node, self.base_dir, self.helper_image)
            try:
                await self.client.create(self.pod_kind, names.NS_SYSTEM, pod)
            except st.ApiError as exc:
                if exc.code != 409:
                    raise
            log.info(
                "volume %s: helper pod %s removes %s on node %s", name, helper_name, spec["hostPath"]["path"], node
            )
            return
        helper_phase = dict_at(helper.object(), "status").get("phase")
        if helper_phase == "Succeeded":
            await self._delete_volume(name, uid)
            await self._delete_pod(helper_name)
            log.info("volume %s deleted with its directory", name)
        elif helper_phase == "Failed":
            message = (
                f"helper pod {names.NS_SYSTEM}/{helper_name} failed to remove the volume's directory on node {node}"
            )
            await self.events.record(ref, "Warning", "VolumeFailedDelete", message)
            await self._delete_pod(helper_name)
            self.queue.add_rate_limited(("pv", "", name))

    def _node_entry(self, value: str) -> str | None:
        """The node's name, from a name or an ``orch.io/hostname`` label value."""
        if self.nodes.get("", value) is not None:
            return value
        for e in self.nodes.list():
            if e.labels.get(names.LABEL_HOSTNAME) == value:
                return e.name
        return None

    async def _volume_failed(self, volume: dict, message: str) -> None:
        status = dict(dict_at(volume, "status"), phase=pvs.VOLUME_FAILED, message=message)
        name = str(dict_at(volume, "metadata").get("name") or "")
        await self.client.update(self.pv_kind, "", name, dict(volume, status=status), subresource="status")

    async def _delete_volume(self, name: str, uid: str) -> None:
        """Our finalizer off (the storage is gone), then the volume."""
        self._deleted.add(uid)
        await remove_finalizer(self.client, self.pv_kind, "", name, uid, names.FINALIZER_PROVISIONER)
        try:
            await self.client.delete(self.pv_kind, "", name)
        except st.ApiError as exc:
            if exc.code != 404:
                raise

    async def _delete_pod(self, name: str) -> None:
        """The finished helper pod, at once: its containers have exited."""
        try:
            await self.client.delete(self.pod_kind, names.NS_SYSTEM, name, DeleteOptions(grace_period_seconds=0))
        except st.ApiError as exc:
            if exc.code != 404:
                raise


def _finalizers(obj: Mapping) -> list:
    found = dict_at(obj, "metadata").get("finalizers")
    return found if isinstance(found, list) else []
