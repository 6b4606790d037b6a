"""The persistent volume binder: binds claims to volumes and keeps both phases true.

A claim without a volume (``spec.volumeName`` empty) gets the best fitting volume
(``api/persistentvolumes.py``: class, access modes, capacity, volume mode, selector,
pre-binding): the volume is written first (``spec.claimRef``, phase ``Bound``), then the
claim (``spec.volumeName``, phase ``Bound`` with the volume's capacity and access modes),
each marked ``pv.orch.io/bound-by-controller: "yes"`` when this controller chose the
pairing and the claim ``pv.orch.io/bind-completed: "yes"``, as upstream's binder does.
A claim naming its volume, or a volume whose ``claimRef`` names a claim, is bound to
exactly that one.

When nothing fits: a claim of a ``WaitForFirstConsumer`` class waits for the scheduler
(event ``WaitForFirstConsumer``, or ``WaitForPodScheduled`` while a pod using it waits
for a node); once the scheduler has written ``volume.orch.io/selected-node``, or for an
``Immediate`` class, the claim is handed to its class's provisioner
(``volume.orch.io/storage-provisioner``, event ``ExternalProvisioning``); a claim without
a class waits (``FailedBinding``). A claim that asks for no class at all gets the default
class, even when that class was made after the claim (upstream's retroactive default).

Volumes: no ``claimRef``: ``Available``. Claim gone (or a new claim of that name):
``Released``, then the reclaim policy: ``Retain`` keeps it ``Released``; ``Delete`` is
the provisioner's job for a provisioned volume (``pv.orch.io/provisioned-by``; the bundled
local-path provisioner does its own) and ``Failed`` for any other, since this server
deletes no storage itself; ``Recycle`` is refused (``Failed``). Bound claims whose volume
is gone or bound elsewhere turn ``Lost`` (``ClaimLost``, ``ClaimMisbound``).

Everything is done again every 15 s (upstream's resync), so a claim waiting for a
volume binds once one shows up.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from typing import Mapping

from ..api import names
from ..api import persistentvolumes as pvs
from ..api.helpers import dict_at, object_reference
from ..client.events import EventRecorder
from ..client.informer import InformerFactory
from ..client.interface import Client
from ..storage.cacher import CacheEvent
from .queue import RateLimitedQueue, run_worker

log = logging.getLogger("orch-apiserver.controllers.persistentvolume")

RESYNC_PERIOD = 15.0
COMPONENT = "persistentvolume-controller"

MSG_WAIT_FIRST_CONSUMER = "waiting for first consumer to be created before binding"
MSG_NO_CLASS = "no persistent volumes available for this claim and no storage class is set"
MSG_LOST_REFERENCE = "Bound claim has lost reference to PersistentVolume. Data on the volume is lost!"
MSG_LOST_VOLUME = "Bound claim has lost its PersistentVolume. Data on the volume is lost!"
MSG_MISBOUND = "Two claims are bound to the same volume, this one is bound incorrectly"
MSG_RECYCLE = (
    "the Recycle reclaim policy is not supported (upstream deprecated it): delete the volume's data and "
    "the volume, or set persistentVolumeReclaimPolicy to Retain or Delete"
)


def external_provisioning_message(provisioner: str) -> str:
    return (
        f'waiting for a volume to be created, either by external provisioner "{provisioner}" '
        "or manually created by system administrator"
    )


def no_deleter_message(volume_name: str) -> str:
    return (
        f'error getting deleter volume plugin for volume "{volume_name}": no deletable volume plugin matched '
        "(this server deletes only volumes its provisioner made; delete the storage and the volume by hand)"
    )


def _set_annotation(obj: dict, key: str, value: str) -> bool:
    md = obj.setdefault("metadata", {})
    ann = md.get("annotations")
    if not isinstance(ann, dict):
        ann = md["annotations"] = {}
    if ann.get(key) == value:
        return False
    ann[key] = value
    return True


class PersistentVolumeController:
    def __init__(self, client: Client, informers: InformerFactory, *, resync_period: float = RESYNC_PERIOD):
        self.client = client
        self.resync_period = resync_period
        self.pv_kind = informers.kind("", "v1", "persistentvolumes")
        self.pvc_kind = informers.kind("", "v1", "persistentvolumeclaims")
        self.volumes = informers.for_kind(self.pv_kind)
        self.claims = informers.for_kind(self.pvc_kind)
        self.classes = informers.for_resource(names.STORAGE_GROUP, "v1", "storageclasses")
        self.pods = informers.for_resource("", "v1", "pods")
        self.events = EventRecorder(client, informers.registry, COMPONENT)
        self.queue = RateLimitedQueue()
        # The resource version of this controller's last write of each object: a cache
        # copy older than that is skipped (the newer one's event queues the key again),
        # instead of acting on it and losing a conflict.
        self._written: dict[tuple[str, str, str], int] = {}

    # --- events ------------------------------------------------------------------------
    def start(self) -> None:
        self.volumes.add_handler(self.on_volume)
        self.claims.add_handler(self.on_claim)
        self.classes.add_handler(self.on_class)

    def enqueue_all(self) -> None:
        for e in self.claims.list():
            self.queue.add(("pvc", e.namespace, e.name))
        for e in self.volumes.list():
            self.queue.add(("pv", "", e.name))

    def on_volume(self, ev: CacheEvent | None) -> None:
        if ev is None:
            self.enqueue_all()
            return
        if ev.type != "DELETED":
            self.queue.add(("pv", "", ev.entry.name))
        else:
            self._written.pop(("pv", "", ev.entry.name), None)
        for entry in (ev.entry, ev.prev):
            ref = pvs.claim_ref_of(entry.object()) if entry is not None else None
            if ref is not None:
                self.queue.add(("pvc", str(ref.get("namespace") or ""), str(ref["name"])))

    def on_claim(self, ev: CacheEvent | None) -> None:
        if ev is None:
            return  # the volumes' replay queues everything
        if ev.type != "DELETED":
            self.queue.add(("pvc", ev.entry.namespace, ev.entry.name))
            volume_name = dict_at(ev.entry.object(), "spec").get("volumeName")
            if volume_name:
                self.queue.add(("pv", "", str(volume_name)))
            return
        # A deleted claim releases the volumes bound to it.
        self._written.pop(("pvc", ev.entry.namespace, ev.entry.name), None)
        for e in self.volumes.list():
            ref = pvs.claim_ref_of(e.object())
            if ref is not None and ref.get("name") == ev.entry.name and ref.get("namespace") == ev.entry.namespace:
                self.queue.add(("pv", "", e.name))

    def on_class(self, ev: CacheEvent | None) -> None:
        if ev is None or ev.type == "DELETED":
            return
        for e in self.claims.list():
            if not dict_at(e.object(), "spec").get("volumeName"):
                self.queue.add(("pvc", e.namespace, e.name))

    async def run(self) -> None:
        async with asyncio.TaskGroup() as tg:
            tg.create_task(run_worker(self.queue, self.sync, log, "persistent volume binder item"), name="pv-binder")
            tg.create_task(self._resync(), name="pv-binder-resync")

    async def _resync(self) -> None:
        while True:
            await asyncio.sleep(self.resync_period)
            self.enqueue_all()

    async def sync(self, key: tuple[str, str, str]) -> None:
        what, namespace, name = key
        if what == "pv":
            entry = self.volumes.get("", name)
            if entry is not None and entry.rv >= self._written.get(key, 0):
                await self.sync_volume(entry.object())
            return
        entry = self.claims.get(namespace, name)
        if entry is None or entry.rv < self._written.get(key, 0):
            return
        claim = entry.object()
        if pvs.annotations_of(claim).get(names.ANNOTATION_BIND_COMPLETED):
            await self.sync_bound_claim(claim)
        else:
            await self.sync_unbound_claim(claim)

    # --- claims ------------------------------------------------------------------------
    def _class(self, name: str) -> dict | None:
        e = self.classes.get("", name) if name else None
        return e.object() if e is not None else None

    def _volume(self, name: str) -> dict | None:
        e = self.volumes.get("", name) if name else None
        return e.object() if e is not None else None

    def delay_binding(self, claim: Mapping) -> bool:
        """Upstream's shouldDelayBinding: a WaitForFirstConsumer class and no node chosen yet."""
        if pvs.annotations_of(claim).get(names.ANNOTATION_SELECTED_NODE):
            return False
        return pvs.class_binding_mode(self._class(pvs.claim_class(claim))) == pvs.VOLUME_BINDING_WAIT

    async def sync_unbound_claim(self, claim: dict) -> None:
        spec = dict_at(claim, "spec")
        ref = object_reference(claim, "PersistentVolumeClaim")
        volume_name = str(spec.get("volumeName") or "")
        if not volume_name:
            if pvs.claim_class_unset(claim) and await self._assign_default_class(claim):
                return  # the claim's update brings it back with its class
            delay = self.delay_binding(claim)
            volume = pvs.find_matching_volume(claim, [e.object() for e in self.volumes.list()], delay_binding=delay)
            if volume is None:
                class_name = pvs.claim_class(claim)
                if delay:
                    await self._wait_for_consumer(claim)
                elif class_name:
                    claim = await self._provision(claim, class_name)
                else:
                    await self.events.record(ref, "Normal", "FailedBinding", MSG_NO_CLASS)
                await self._claim_status(claim, pvs.CLAIM_PENDING, None)
                return
            await self.bind(volume, claim)
            return
        volume = self._volume(volume_name)
        if volume is None:
            log.info("claim %s/%s asks for volume %s, which does not exist (yet)", *pvs.claim_key(claim), volume_name)
            await self._claim_status(claim, pvs.CLAIM_PENDING, None)
            return
        if pvs.claim_ref_of(volume) is None:
            mismatch = pvs.volume_mismatch(volume, claim)
            if mismatch:
                await self.events.record(
                    ref, "Warning", "VolumeMismatch", f'Cannot bind to requested volume "{volume_name}": {mismatch}'
                )
                await self._claim_status(claim, pvs.CLAIM_PENDING, None)
                return
            await self.bind(volume, claim)
        elif pvs.bound_to_claim(volume, claim):
            await self.bind(volume, claim)
        else:
            await self.events.record(
                ref, "Warning", "FailedBinding", f'volume "{volume_name}" already bound to a different claim.'
            )
            await self._claim_status(claim, pvs.CLAIM_PENDING, None)

    async def sync_bound_claim(self, claim: dict) -> None:
        ref = object_reference(claim, "PersistentVolumeClaim")
        volume_name = str(dict_at(claim, "spec").get("volumeName") or "")
        if not volume_name:
            await self._claim_lost(claim, "ClaimLost", MSG_LOST_REFERENCE)
            return
        volume = self._volume(volume_name)
        if volume is None:
            await self._claim_lost(claim, "ClaimLost", MSG_LOST_VOLUME)
            return
        if pvs.claim_ref_of(volume) is None or pvs.bound_to_claim(volume, claim):
            await self.bind(volume, claim)
            return
        await self.events.record(ref, "Warning", "ClaimMisbound", MSG_MISBOUND)
        await self._claim_status(claim, pvs.CLAIM_LOST, None)

    async def _claim_lost(self, claim: dict, reason: str, message: str) -> None:
        if dict_at(claim, "status").get("phase") != pvs.CLAIM_LOST:
            await self.events.record(object_reference(claim, "PersistentVolumeClaim"), "Warning", reason, message)
        await self._claim_status(claim, pvs.CLAIM_LOST, None)

    async def _assign_default_class(self, claim: dict) -> bool:
        default = pvs.default_storage_class(e.object() for e in self.classes.list())
        if default is None:
            return False
        class_name = dict_at(default, "metadata").get("name")
        new = copy.deepcopy(claim)
        new.setdefault("spec", {})["storageClassName"] = class_name
        ns, name = pvs.claim_key(claim)
        await self._update(self.pvc_kind, ns, new)
        log.info("claim %s/%s: assigned the default storage class %s", ns, name, class_name)
        return True

    async def _wait_for_consumer(self, claim: dict) -> None:
        ns, name = pvs.claim_key(claim)
        waiting = sorted(
            e.name
            for e in self.pods.list(ns)
            if not e.fields.get("spec.nodeName") and name in pvs.pod_claim_names(e.object())
        )
        reason, message = "WaitForFirstConsumer", MSG_WAIT_FIRST_CONSUMER
        if len(waiting) == 1:
            reason, message = "WaitForPodScheduled", f"waiting for pod {waiting[0]} to be scheduled"
        elif waiting:
            reason, message = "WaitForPodScheduled", f"waiting for pods {','.join(waiting)} to be scheduled"
        await self.events.record(object_reference(claim, "PersistentVolumeClaim"), "Normal", reason, message)

    async def _provision(self, claim: dict, class_name: str) -> dict:
        """Hand the claim to its class's provisioner; the claim as stored now."""
        ref = object_reference(claim, "PersistentVolumeClaim")
        storage_class = self._class(class_name)
        if storage_class is None:
            await self.events.record(
                ref, "Warning", "ProvisioningFailed", f'storageclass.{names.STORAGE_GROUP} "{class_name}" not found'
            )
            return claim
        provisioner = str(storage_class.get("provisioner") or "")
        ann = pvs.annotations_of(claim)
        if (
            ann.get(names.ANNOTATION_STORAGE_PROVISIONER) != provisioner
            or ann.get(names.ANNOTATION_STORAGE_PROVISIONER_BETA) != provisioner
        ):
            new = copy.deepcopy(claim)
            _set_annotation(new, names.ANNOTATION_STORAGE_PROVISIONER, provisioner)
            _set_annotation(new, names.ANNOTATION_STORAGE_PROVISIONER_BETA, provisioner)
            claim = await self._update(self.pvc_kind, pvs.claim_key(claim)[0], new)
        await self.events.record(ref, "Normal", "ExternalProvisioning", external_provisioning_message(provisioner))
        return claim

    # --- binding -----------------------------------------------------------------------
    async def bind(self, volume: dict, claim: dict) -> None:
        """The volume to the claim, then the claim to the volume, each with its status
        (upstream's order: a crash between the writes leaves a volume the next sync finishes)."""
        ns, name = pvs.claim_key(claim)
        volume_name = str(dict_at(volume, "metadata").get("name") or "")
        ref = pvs.claim_ref_of(volume)
        claim_uid = dict_at(claim, "metadata").get("uid")
        if ref is None or ref.get("uid") != claim_uid:
            new = copy.deepcopy(volume)
            if not pvs.bound_to_claim(volume, claim):
                _set_annotation(new, names.ANNOTATION_BOUND_BY_CONTROLLER, pvs.ANNOTATION_YES)
            new.setdefault("spec", {})["claimRef"] = pvs.claim_ref(claim)
            volume = await self._update(self.pv_kind, "", new)
            log.info("volume %s bound to claim %s/%s", volume_name, ns, name)
        volume = await self._volume_status(volume, pvs.VOLUME_BOUND)
        new_claim = copy.deepcopy(claim)
        changed = False
        if dict_at(claim, "spec").get("volumeName") != volume_name:
            new_claim.setdefault("spec", {})["volumeName"] = volume_name
            _set_annotation(new_claim, names.ANNOTATION_BOUND_BY_CONTROLLER, pvs.ANNOTATION_YES)
            changed = True
        changed = _set_annotation(new_claim, names.ANNOTATION_BIND_COMPLETED, pvs.ANNOTATION_YES) or changed
        if changed:
            claim = await self._update(self.pvc_kind, ns, new_claim)
            log.info("claim %s/%s bound to volume %s", ns, name, volume_name)
        await self._claim_status(claim, pvs.CLAIM_BOUND, volume)

    async def _update(self, kind, namespace: str, obj: dict, subresource: str = "") -> dict:
        md = dict_at(obj, "metadata")
        name = str(md.get("name") or "")
        out = await self.client.update(kind, namespace, name, obj, subresource=subresource)
        what = "pv" if kind is self.pv_kind else "pvc"
        self._written[(what, namespace, name)] = int(dict_at(out, "metadata").get("resourceVersion") or 0)
        return out

    async def _claim_status(self, claim: dict, phase: str, volume: Mapping | None) -> None:
        status = dict(dict_at(claim, "status"))
        new_status = dict(status, phase=phase)
        if volume is not None:
            vspec = dict_at(volume, "spec")
            new_status["accessModes"] = list(vspec.get("accessModes") or [])
            new_status["capacity"] = dict(vspec.get("capacity") or {})
        elif phase == pvs.CLAIM_PENDING:
            new_status.pop("accessModes", None)
            new_status.pop("capacity", None)
        if new_status == status:
            return
        body = dict(claim, status=new_status)
        await self._update(self.pvc_kind, pvs.claim_key(claim)[0], body, subresource="status")

    async def _volume_status(self, volume: dict, phase: str, message: str = "", reason: str = "") -> dict:
        status = dict(dict_at(volume, "status"))
        new_status = {k: v for k, v in status.items() if k not in ("message", "reason")}
        new_status["phase"] = phase
        if message:
            new_status["message"] = message
        if reason:
            new_status["reason"] = reason
        if new_status == status:
            return volume
        return await self._update(self.pv_kind, "", dict(volume, status=new_status), subresource="status")

    # --- volumes -----------------------------------------------------------------------
    async def sync_volume(self, volume: dict) -> None:
        name = str(dict_at(volume, "metadata").get("name") or "")
        phase = dict_at(volume, "status").get("phase")
        ref = pvs.claim_ref_of(volume)
        if ref is None:
            if phase != pvs.VOLUME_AVAILABLE:
                await self._volume_status(volume, pvs.VOLUME_AVAILABLE)
            return
        ns, claim_name = str(ref.get("namespace") or ""), str(ref["name"])
        if not ref.get("uid"):
            # Pre-bound to a claim that has not bound yet: the claim's sync binds it.
            if phase != pvs.VOLUME_AVAILABLE:
                await self._volume_status(volume, pvs.VOLUME_AVAILABLE)
            self.queue.add(("pvc", ns, claim_name))
            return
        entry = self.claims.get(ns, claim_name)
        claim = entry.object() if entry is not None and entry.uid == ref.get("uid") else None
        if claim is None:
            if phase not in (pvs.VOLUME_RELEASED, pvs.VOLUME_FAILED):
                volume = await self._volume_status(volume, pvs.VOLUME_RELEASED)
                log.info("volume %s released: its claim %s/%s is gone", name, ns, claim_name)
            if dict_at(volume, "status").get("phase") == pvs.VOLUME_RELEASED:
                await self.reclaim(volume)
            return
        claim_volume = dict_at(claim, "spec").get("volumeName") or ""
        if not claim_volume:
            self.queue.add(("pvc", ns, claim_name))  # the claim's sync finishes the binding
            return
        if claim_volume == name:
            if phase != pvs.VOLUME_BOUND:
                await self._volume_status(volume, pvs.VOLUME_BOUND)
            return
        # The claim is bound to another volume.
        ann = pvs.annotations_of(volume)
        policy = dict_at(volume, "spec").get("persistentVolumeReclaimPolicy")
        if names.ANNOTATION_PROVISIONED_BY in ann and policy == "Delete":
            if phase not in (pvs.VOLUME_RELEASED, pvs.VOLUME_FAILED):
                volume = await self._volume_status(volume, pvs.VOLUME_RELEASED)
            if dict_at(volume, "status").get("phase") == pvs.VOLUME_RELEASED:
                await self.reclaim(volume)
            return
        await self.unbind(volume)

    async def unbind(self, volume: dict) -> None:
        """Undo a binding this controller made (the volume is free again); of a user's
        pre-binding only the claim's uid is dropped."""
        new = copy.deepcopy(volume)
        ann = new.get("metadata", {}).get("annotations") or {}
        if names.ANNOTATION_BOUND_BY_CONTROLLER in ann:
            del ann[names.ANNOTATION_BOUND_BY_CONTROLLER]
            new["spec"].pop("claimRef", None)
        else:
            new["spec"]["claimRef"] = {k: v for k, v in new["spec"]["claimRef"].items() if k != "uid"}
        volume = await self._update(self.pv_kind, "", new)
        await self._volume_status(volume, pvs.VOLUME_AVAILABLE)

    async def reclaim(self, volume: dict) -> None:
        name = str(dict_at(volume, "metadata").get("name") or "")
        policy = dict_at(volume, "spec").get("persistentVolumeReclaimPolicy") or "Retain"
        ref = object_reference(volume, "PersistentVolume")
        if policy == "Retain":
            return
        if policy == "Recycle":
            await self.events.record(ref, "Warning", "VolumeFailedRecycle", MSG_RECYCLE)
            await self._volume_status(volume, pvs.VOLUME_FAILED, MSG_RECYCLE)
            return
        if pvs.being_deleted(volume):
            return
        if names.ANNOTATION_PROVISIONED_BY in pvs.annotations_of(volume):
            return  # its provisioner deletes it (the bundled one: controllers/localpath.py)
        message = no_deleter_message(name)
        await self.events.record(ref, "Warning", "VolumeFailedDelete", message)
        await self._volume_status(volume, pvs.VOLUME_FAILED, message)
