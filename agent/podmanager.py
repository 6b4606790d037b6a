"""The pod manager: the pods the node should run, and the mirror pods of its static pods.

:class:`PodManager` sits between the pod config merge and the pod workers (DESIGN.md,
the agent's data flow). Every merged :class:`agent.pods.PodUpdate` passes through
:meth:`PodManager.apply` before the workers act on it, so the manager always holds
the desired pods (by UID) and the static pods (by full name).

A static pod (from the file or URL source) has a mirror pod in the API server: its
copy, annotated ``orch.io/config.mirror`` with the static pod's hash and owned by the
Node, through which its status is reported. Mirror pods come from the API-server
source (:meth:`PodManager.set_mirror_pods`), never from the merge. The manager keeps
the two in step from the pod flow, as upstream's pod manager and mirror client do:

* a static pod added or changed: its mirror pod is created, or deleted and then
  created again once the deletion shows up in the watch;
* a static pod removed: its mirror pod is deleted;
* a mirror pod deleted in the API (a graceful deletion is finished at once with
  grace period 0, as upstream does), or changed so that it no longer matches its
  static pod: it is re-created once the deletion shows up in the watch;
* a mirror pod with no static pod: it is deleted.

Only the names that changed are reconciled; a failed call is retried after
:data:`MIRROR_RETRY` seconds. There is no periodic poll.
"""

from __future__ import annotations

import asyncio
from typing import Callable, Protocol

from apiserver_min.api import names

from . import logging as agent_logging
from . import pods as podutil
from .pods import Op, PodUpdate

__all__ = ["PodManager", "MirrorPodClient", "MIRROR_RETRY"]

log = agent_logging.get_logger("podmanager")

MIRROR_RETRY = 1.0


def _deleting(pod: dict) -> bool:
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def _static_hash(pod: dict) -> str | None:
    return podutil.annotations(pod).get(names.ANNOTATION_CONFIG_HASH)


def _mirror_hash(mirror: dict) -> str | None:
    return podutil.annotations(mirror).get(names.ANNOTATION_CONFIG_MIRROR)


def _version(mirror: dict | None) -> tuple[str, str, bool] | None:
    if mirror is None:
        return None
    meta = mirror.get("metadata") or {}
    return (meta.get("uid") or "", meta.get("resourceVersion") or "", _deleting(mirror))


class MirrorPodClient(Protocol):
    """Writes mirror pods to the API server (:class:`agent.mirrorclient.MirrorClient`, or a
    fake in a unit test)."""

    async def create(self, pod: dict) -> dict | None:
        """The created mirror pod; None when one of that name exists already."""
        ...

    async def delete(self, mirror: dict) -> None: ...


class PodManager:
    """The desired pods of the node, and one mirror pod in the API per static pod."""

    def __init__(self, mirror_client: MirrorPodClient | None = None) -> None:
        self.mirror_client = mirror_client
        self.on_mirror_created: Callable[[dict], None] = lambda static_pod: None
        self._pods: dict[str, dict] = {}  # uid -> desired pod
        self._static: dict[str, dict] = {}  # full name -> static pod
        self._mirrors: dict[str, dict] = {}  # full name -> mirror pod in the API
        self._mirrors_known = asyncio.Event()  # the API source reported the mirror pods once
        self._dirty: set[str] = set()  # full names whose mirror pod needs a look
        self._wake = asyncio.Event()
        self.mirror_creates = 0
        self.mirror_deletes = 0

    # --- the desired pods, from the pod flow -----------------------------------------------

    def apply(self, update: PodUpdate) -> None:
        """Take one merged update (before the workers do)."""
        if update.op == Op.REMOVE:
            for pod in update.pods:
                self._pods.pop(podutil.uid(pod), None)
                key = podutil.full_name(pod)
                held = self._static.get(key)
                if held is not None and podutil.uid(held) == podutil.uid(pod):
                    del self._static[key]
                    self._mark(key)
            return
        if update.op not in (Op.ADD, Op.UPDATE, Op.DELETE, Op.RECONCILE):
            return
        for pod in update.pods:
            self._pods[podutil.uid(pod)] = pod
            if podutil.is_static(pod):
                key = podutil.full_name(pod)
                held = self._static.get(key)
                self._static[key] = pod
                if held is None or _static_hash(held) != _static_hash(pod) or podutil.uid(held) != podutil.uid(pod):
                    self._mark(key)

    def pods(self) -> list[dict]:
        return list(self._pods.values())

    def get(self, uid: str) -> dict | None:
        return self._pods.get(uid)

    def static_pods(self) -> list[dict]:
        return list(self._static.values())

    # --- mirror pods, from the API-server source ------------------------------------------

    def set_mirror_pods(self, mirrors: dict[str, dict]) -> None:
        """The mirror pods now in the API (full name -> pod); reconcile the names that changed."""
        old = self._mirrors
        self._mirrors = dict(mirrors)
        for key in set(old) | set(mirrors):
            if _version(old.get(key)) != _version(mirrors.get(key)):
                self._mark(key)
        self._mirrors_known.set()

    def mirror_of(self, pod: dict) -> dict | None:
        """The static pod's current mirror pod (not being deleted, of the same hash), or None."""
        mirror = self._mirrors.get(podutil.full_name(pod))
        if mirror is None or _deleting(mirror) or _mirror_hash(mirror) != _static_hash(pod):
            return None
        return mirror

    def orphaned_mirror_names(self) -> list[str]:
        return sorted(key for key in self._mirrors if key not in self._static)

    # --- keeping them in step -------------------------------------------------------------

    def _mark(self, key: str) -> None:
        self._dirty.add(key)
        self._wake.set()

    async def run(self) -> None:
        """Reconcile mirror pods as the pod flow and the watch report changes (a supervised task)."""
        if self.mirror_client is None:
            raise RuntimeError("the pod manager needs a mirror client to keep mirror pods")
        await self._mirrors_known.wait()
        self._dirty |= set(self._static) | set(self._mirrors)
        self._wake.set()
        loop = asyncio.get_running_loop()
        while True:
            await self._wake.wait()
            self._wake.clear()
            keys, self._dirty = sorted(self._dirty), set()
            for key in keys:
                try:
                    await self._reconcile(key)
                except Exception as exc:  # noqa: BLE001 - one name failing must not stop the others
                    log.error("Mirror pod reconcile failed", pod=key, err=getattr(exc, "message", None) or exc)
                    loop.call_later(MIRROR_RETRY, self._mark, key)

    async def _reconcile(self, key: str) -> None:
        assert self.mirror_client is not None
        pod = self._static.get(key)
        mirror = self._mirrors.get(key)
        if mirror is not None:
            if pod is None:
                why = "static pod gone"
            elif _deleting(mirror):
                why = "being deleted"  # as upstream: finish a graceful deletion at once, then re-create
            elif _mirror_hash(mirror) != _static_hash(pod):
                why = "out of date"
            else:
                return
            await self._delete(key, mirror, why)
            return  # create once the deletion shows up in the watch (this name is looked at again then)
        if pod is None:
            return
        created = await self.mirror_client.create(pod)
        if created is None:
            return  # a mirror pod the watch has not shown yet: looked at again when it does
        # Known at once (the watch reports it a little later): the pod's status can go to it now.
        self._mirrors[key] = created
        self.mirror_creates += 1
        log.info("Created mirror pod", pod=key)
        self.on_mirror_created(pod)

    async def _delete(self, key: str, mirror: dict, why: str) -> None:
        assert self.mirror_client is not None
        await self.mirror_client.delete(mirror)
        self.mirror_deletes += 1
        log.info("Deleted mirror pod", pod=key, reason=why)
