"""The ``scale`` sub-resource of the scalable kinds (replication controllers,
deployments, replica sets, stateful sets): the object seen as an
``autoscaling/v1`` Scale, whose writes change only ``spec.replicas``."""

from __future__ import annotations

from typing import Any, Callable

from ..api import names
from ..api import status as st
from ..api.kinds import KindInfo
from ..api.kinds import label_selector_text as kinds_label_selector_text
from .rest import ObjectStore, RequestContext


def to_scale(obj: dict) -> dict:
    md = obj.get("metadata") or {}
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    sel = spec.get("selector")
    if obj.get("kind") == "ReplicationController":
        selector = ",".join(f"{k}={v}" for k, v in sorted((sel or {}).items()))
    else:
        selector = "" if not sel else kinds_label_selector_text(sel)
    scale_md = {k: md[k] for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp") if k in md}
    return {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": scale_md,
        "spec": {"replicas": spec.get("replicas", 1)},
        "status": {"replicas": status.get("replicas", 0), "selector": selector},
    }


class ScaleREST:
    # Server-side apply of a Scale is not served.
    patch_types = (names.MEDIA_JSON_PATCH, names.MEDIA_MERGE_PATCH, names.MEDIA_STRATEGIC_MERGE_PATCH)
    patch_kind = (names.AUTOSCALING_GROUP, "v1", "Scale")

    def __init__(self, store: ObjectStore, kind: KindInfo):
        self.store = store
        self.kind = kind

    def to_scale(self, obj: dict) -> dict:
        """The object seen as a Scale (a custom resource reads its own paths)."""
        return to_scale(obj)

    def set_replicas(self, obj: dict, replicas: int) -> None:
        obj.setdefault("spec", {})["replicas"] = replicas

    async def get(self, ctx: RequestContext) -> dict:
        return self.to_scale(await self.store.get_object(self.kind, ctx.namespace, ctx.name))

    async def update(self, ctx: RequestContext, obj: dict) -> tuple[int, dict]:
        return await self._write(ctx, lambda current: obj)

    async def patch(self, ctx: RequestContext, apply: Callable[[dict], Any]) -> tuple[int, dict]:
        return await self._write(ctx, apply)

    async def _write(self, ctx: RequestContext, wanted_from: Callable[[dict], Any]) -> tuple[int, dict]:
        def compute(old: dict) -> dict:
            current = self.to_scale(old)
            wanted = wanted_from(current)
            if not isinstance(wanted, dict):
                raise st.bad_request("a Scale must be an object")
            for part in ("metadata", "spec"):
                if wanted.get(part) is not None and not isinstance(wanted[part], dict):
                    raise st.bad_request(f"Scale {part}: must be an object")
            replicas = (wanted.get("spec") or {}).get("replicas")
            if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
                raise st.invalid(
                    "Scale",
                    ctx.name,
                    [
                        {
                            "reason": "FieldValueInvalid",
                            "field": "spec.replicas",
                            "message": "must be a non-negative integer",
                        }
                    ],
                    "autoscaling",
                )
            rv = (wanted.get("metadata") or {}).get("resourceVersion")
            if rv and rv != current["metadata"].get("resourceVersion"):
                old["metadata"]["resourceVersion"] = rv  # a precondition: conflicts below
            else:
                old["metadata"].pop("resourceVersion", None)
            self.set_replicas(old, replicas)
            return old

        obj, _, _ = await self.store.update(
            self.kind,
            ctx.namespace,
            ctx.name,
            compute,
            ctx.user,
            dry_run=ctx.dry_run,
            field_manager=ctx.field_manager,
        )
        return 200, self.to_scale(obj)
