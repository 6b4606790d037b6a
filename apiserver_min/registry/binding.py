"""The ``pods/binding`` write: a pod gets its node (the sub-resource and the bundled scheduler)."""

from __future__ import annotations

from ..api import status as st
from ..api.helpers import timestamp
from ..api.user import SYSTEM_USER, UserInfo
from .rest import ObjectStore


async def bind_pod(
    store: ObjectStore,
    namespace: str,
    name: str,
    node: str,
    user: UserInfo = SYSTEM_USER,
    *,
    uid: str | None = None,
    dry_run: bool = False,
) -> dict:
    """Bind a pod as the ``pods/binding`` sub-resource does: one internal write that sets
    ``spec.nodeName`` and ``PodScheduled=True``. 409 when the pod is already bound or
    being deleted, or (with ``uid``) when the pod is another one of that name."""
    kind = store.registry.by_resource("", "v1", "pods")
    assert kind is not None

    def compute(old: dict) -> dict:
        md = old["metadata"]
        # No resourceVersion precondition: a concurrent status write is retried on the fresh pod.
        md.pop("resourceVersion", None)
        if uid and md.get("uid") != uid:
            raise st.conflict(
                "pods",
                name,
                "",
                f"Precondition failed: UID in precondition: {uid}, UID in object meta: {md.get('uid')}",
            )
        spec = old.setdefault("spec", {})
        if md.get("deletionTimestamp"):
            raise st.conflict("pods", name, "", f"pod {name} is being deleted, cannot be assigned to a host")
        if spec.get("nodeName"):
            raise st.conflict("pods", name, "", f'pod {name} is already assigned to node "{spec["nodeName"]}"')
        spec["nodeName"] = node
        conds = [c for c in (old.get("status") or {}).get("conditions") or [] if c.get("type") != "PodScheduled"]
        conds.append(
            {"type": "PodScheduled", "status": "True", "lastProbeTime": None, "lastTransitionTime": timestamp()}
        )
        old.setdefault("status", {})["conditions"] = conds
        return old

    obj, _, _ = await store.update(kind, namespace, name, compute, user, subresource="binding", dry_run=dry_run)
    return obj
