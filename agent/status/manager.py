"""Pod status to the API server.

:class:`StatusManager` writes pod status through the ``status`` sub-resource
only when it changed, one writer per pod that always sends the newest version
(an older status never overwrites a newer one); for static pods the status goes
to their mirror pod, which the pod manager names. After a deleted API pod has
been terminated it deletes the object with grace period 0, as upstream's final
step of graceful deletion.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Protocol

from .. import logging as agent_logging
from .. import pods as podutil
from ..client.interface import ApiInterface
from ..client.rest import ApiError

__all__ = ["StatusManager", "MirrorLookup"]

log = agent_logging.get_logger("status")

STATUS_RETRY = 1.0


class MirrorLookup(Protocol):
    """Where a static pod's status goes: its current mirror pod (the pod manager)."""

    def mirror_of(self, pod: dict) -> dict | None: ...


class StatusManager:
    """Pod status to the API server, newest version only, one writer task per pod."""

    def __init__(self, client: ApiInterface, *, mirrors: MirrorLookup | None = None) -> None:
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
            # Its mirror pod goes with the static pod (the pod manager): nothing to finish here.
            self._latest.pop(uid, None)
            self._sent.pop(uid, None)
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
            await self.client.patch(podutil.pod_path(ns, name, "status"), body, patch_type="merge")
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

        ns, name = podutil.namespace(pod), podutil.name(pod)
        body = podutil.delete_now_options(pod)
        try:
            await self.client.delete(podutil.pod_path(ns, name), body=body)
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
