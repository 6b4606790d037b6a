"""The one error the config builders and the volume manager raise for a pod they cannot run.

A pod can be fine for the API server and still impossible on this node: a
forbidden sysctl, a hostPath of the wrong type, a ConfigMap that does not
exist. The pod worker turns a :class:`PodConfigError` into what upstream
shows the user: an event and a waiting reason (``reason``) with a message,
and keeps retrying on the next sync, so the error carries both parts
separately instead of one formatted string.

Reasons used (upstream's spellings):

* ``SysctlForbidden`` - the pod asks for a sysctl this node does not allow (admission);
* ``CreatePodSandboxError`` - the sandbox config cannot be made (bad hostname, DNS file);
* ``CreateContainerConfigError`` - the container config cannot be made (env sources,
  runAsNonRoot, missing volume, subPath);
* ``FailedMount`` - a volume cannot be set up.
"""

from __future__ import annotations

__all__ = [
    "PodConfigError",
    "REASON_SYSCTL_FORBIDDEN",
    "REASON_CREATE_SANDBOX",
    "REASON_CREATE_CONTAINER_CONFIG",
    "REASON_FAILED_MOUNT",
]

REASON_SYSCTL_FORBIDDEN = "SysctlForbidden"
REASON_CREATE_SANDBOX = "CreatePodSandboxError"
REASON_CREATE_CONTAINER_CONFIG = "CreateContainerConfigError"
REASON_FAILED_MOUNT = "FailedMount"


class PodConfigError(Exception):
    """A pod (or one of its containers or volumes) this node cannot set up, and why."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message

    def __repr__(self) -> str:
        return f"PodConfigError(reason={self.reason!r}, message={self.message!r})"
