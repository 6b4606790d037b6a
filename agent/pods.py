"""What every part of the agent says about pods: updates, identity, small accessors.

Pods travel through the agent as plain dicts in the API's JSON shape (the
same objects the API server stores), defaulted and validated by the source
that produced them. This module holds the few types that cross component
boundaries:

* :class:`PodUpdate` - what a source hands to the pod config merge, and what the
  merge hands to the pod manager (see DESIGN.md, the agent data flow);
* :class:`ManifestProblem` - a manifest a source could not use, for the log and
  the agent's ``/pods`` view;
* accessors that every component would otherwise re-spell.
"""

from __future__ import annotations

import dataclasses
import enum
import time
from typing import Any, Iterable, Protocol

from apiserver_min.api import names

__all__ = [
    "Op",
    "PodUpdate",
    "PodSink",
    "PodSource",
    "ManifestProblem",
    "SOURCE_FILE",
    "SOURCE_HTTP",
    "SOURCE_API",
    "ALL_SOURCES",
    "uid",
    "name",
    "namespace",
    "full_name",
    "pod_path",
    "delete_now_options",
    "spec",
    "containers",
    "init_containers",
    "ephemeral_containers",
    "source_of",
    "is_static",
    "is_mirror",
    "grace_period_seconds",
    "restart_policy",
]

SOURCE_FILE = "file"
SOURCE_HTTP = "http"
SOURCE_API = "api"
ALL_SOURCES = "*"


class Op(str, enum.Enum):
    """Upstream's pod operations.

    Sources send ``SET`` (the whole current set of that source); the merge turns a
    sequence of SETs into ADD (new pod), UPDATE (changed spec or metadata the
    workers act on), DELETE (gracefully, the pod has a deletion timestamp),
    REMOVE (the pod is gone from its source: terminate it) and RECONCILE (only the
    status differs, nothing to run).
    """

    SET = "SET"
    ADD = "ADD"
    UPDATE = "UPDATE"
    DELETE = "DELETE"
    REMOVE = "REMOVE"
    RECONCILE = "RECONCILE"

    def __str__(self) -> str:
        return self.value


@dataclasses.dataclass(frozen=True)
class PodUpdate:
    op: Op
    source: str
    pods: tuple[dict, ...] = ()

    @classmethod
    def make(cls, op: Op, source: str, pods: Iterable[dict] = ()) -> "PodUpdate":
        return cls(op, source, tuple(pods))


class PodSink(Protocol):
    """What a source hands its updates to: the pod config merge (:class:`agent.sources.merge.PodConfig`)."""

    def push(self, update: PodUpdate) -> None:
        """Take ``update``; its pods are read, never changed or kept (copies are kept)."""
        ...

    def report_problems(self, source: str, problems: list["ManifestProblem"]) -> None: ...


class PodSource(Protocol):
    """A pod source (file, URL, API server): a supervised task that pushes ``Op.SET`` snapshots to its sink."""

    async def run(self) -> None: ...


@dataclasses.dataclass(frozen=True)
class ManifestProblem:
    """A manifest that could not be used: where it came from and why, in words."""

    source: str  # SOURCE_FILE / SOURCE_HTTP
    location: str  # the file path or the URL
    message: str
    since: float = dataclasses.field(default_factory=time.time)


# --- accessors -------------------------------------------------------------------


def uid(pod: dict) -> str:
    return (pod.get("metadata") or {}).get("uid") or ""


def name(pod: dict) -> str:
    return (pod.get("metadata") or {}).get("name") or ""


def namespace(pod: dict) -> str:
    return (pod.get("metadata") or {}).get("namespace") or "default"


def full_name(pod: dict) -> str:
    """``name_namespace``, upstream's key for a pod in logs and maps."""
    return f"{name(pod)}_{namespace(pod)}"


def delete_now_options(pod: dict) -> dict:
    """DeleteOptions that remove this very pod object at once: grace period 0 and a UID
    precondition, so that a newer pod of the same name is never the one deleted."""
    return {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0, "preconditions": {"uid": uid(pod)}}


def pod_path(namespace: str, name: str, sub: str = "") -> str:
    """The API path of a pod (or of its subresource ``sub``)."""
    path = f"/api/v1/namespaces/{namespace}/pods/{name}"
    return f"{path}/{sub}" if sub else path


def spec(pod: dict) -> dict:
    return pod.get("spec") or {}


def containers(pod: dict) -> list[dict]:
    return list(spec(pod).get("containers") or [])


def init_containers(pod: dict) -> list[dict]:
    return list(spec(pod).get("initContainers") or [])


def ephemeral_containers(pod: dict) -> list[dict]:
    """Debugging containers added through ``pods/ephemeralcontainers``: each started once
    in the running sandbox, never restarted."""
    return [c for c in spec(pod).get("ephemeralContainers") or [] if isinstance(c, dict)]


def annotations(pod: dict) -> dict[str, str]:
    return (pod.get("metadata") or {}).get("annotations") or {}


def source_of(pod: dict) -> str:
    """The config source recorded on the pod (``file``, ``http``, ``api``)."""
    return annotations(pod).get(names.ANNOTATION_CONFIG_SOURCE, SOURCE_API)


def is_static(pod: dict) -> bool:
    return source_of(pod) != SOURCE_API


def is_mirror(pod: dict) -> bool:
    """A mirror pod: the API server's copy of a static pod, never a pod to run."""
    return names.ANNOTATION_CONFIG_MIRROR in annotations(pod)


def restart_policy(pod: dict) -> str:
    return spec(pod).get("restartPolicy") or "Always"


def grace_period_seconds(pod: dict, override: int | None = None) -> int:
    """The grace period to terminate with: an override, the deletion's, or the spec's (30)."""
    if override is not None:
        return max(0, override)
    meta = pod.get("metadata") or {}
    if meta.get("deletionGracePeriodSeconds") is not None:
        return max(0, int(meta["deletionGracePeriodSeconds"]))
    value = spec(pod).get("terminationGracePeriodSeconds")
    return 30 if value is None else max(0, int(value))


def deep_get(obj: Any, *path: str, default: Any = None) -> Any:
    for key in path:
        if not isinstance(obj, dict):
            return default
        obj = obj.get(key)
        if obj is None:
            return default
    return obj
