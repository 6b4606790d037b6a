"""RuntimeClass: a new pod naming a RuntimeClass takes the class's pod overhead and
scheduling constraints.

As upstream (v1.27), on pod create only:

- an unknown class is 403 ``pod rejected: RuntimeClass "<name>" not found``;
- the class's ``overhead.podFixed`` becomes ``spec.overhead``; a pod that sets an
  overhead of its own that differs is refused, and so is a pod that sets one when
  its class defines none (the validating phase);
- the class's ``scheduling.nodeSelector`` is merged into the pod's (a key the pod
  sets to another value is a conflict, refused) and its ``tolerations`` are merged
  into the pod's."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...api import names
from ...api import status as st
from ...api.quantity import QuantityError, parse_quantity
from ...storage.keys import key_prefix, object_key
from .. import tolerations as tol
from ..chain import Attributes

if TYPE_CHECKING:
    from ...api.kinds import KindInfo, Registry
    from ...registry.store import Store
    from ...storage.cacher import WatchCache

OVERHEAD_MISMATCH = "pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead"
OVERHEAD_WITHOUT_CLASS = "pod rejected: Pod Overhead set without corresponding RuntimeClass defined Overhead"


def same_resources(a: Any, b: Any) -> bool:
    """Two resource lists equal as quantities (``1000m`` is ``1``); absent is empty."""
    a, b = a or {}, b or {}
    if not isinstance(a, dict) or not isinstance(b, dict) or set(a) != set(b):
        return False
    for key, value in a.items():
        try:
            if parse_quantity(value) != parse_quantity(b[key]):
                return False
        except QuantityError:
            if value != b[key]:
                return False
    return True


class RuntimeClassAdmission:
    name = "RuntimeClass"
    resources = frozenset({("", "pods")})
    operations = frozenset({"CREATE"})
    # What it sets from a RuntimeClass (overhead, node selector, tolerations) is checked and
    # defaulted like the client's: ``admit`` says True then, and the store prepares the pod again.
    complete = True

    def __init__(self, store: "Store", cache: "WatchCache", registry: "Registry"):
        self.store = store
        self.cache = cache
        kind = registry.by_resource(names.NODE_GROUP, "v1", "runtimeclasses")
        if kind is None:
            raise LookupError("no kind serves runtimeclasses")
        self.kind: KindInfo = kind

    async def _runtime_class(self, attrs: Attributes) -> tuple[dict, dict | None] | None:
        """(the pod's spec, its RuntimeClass or None); None when the plugin has nothing to do."""
        if attrs.subresource or attrs.operation != "CREATE" or not isinstance(attrs.obj, dict):
            return None
        spec = attrs.obj.get("spec")
        if not isinstance(spec, dict):
            return None
        class_name = spec.get("runtimeClassName")
        if class_name is None:
            return spec, None
        entry = self.cache.cache(key_prefix(self.kind)).items.get(object_key(self.kind, "", str(class_name)))
        if entry is not None:
            return spec, entry.object()
        try:  # the cache trails storage by an event: a class created a moment ago counts
            return spec, await self.store.get_object(self.kind, "", str(class_name))
        except st.ApiError as exc:
            if exc.code == 404:
                raise self._forbidden(attrs, f'pod rejected: RuntimeClass "{class_name}" not found') from None
            raise

    async def admit(self, attrs: Attributes) -> bool:
        found = await self._runtime_class(attrs)
        if found is None:
            return False
        spec, rc = found
        if rc is None:
            return False
        self._apply(attrs, spec, rc)
        return True

    def _apply(self, attrs: Attributes, spec: dict, rc: dict) -> None:
        overhead = (rc.get("overhead") or {}).get("podFixed") if isinstance(rc.get("overhead"), dict) else None
        if rc.get("overhead") is not None:
            if spec.get("overhead") and not same_resources(overhead, spec.get("overhead")):
                raise self._forbidden(attrs, OVERHEAD_MISMATCH)
            if overhead:
                spec["overhead"] = dict(overhead)
            else:
                spec.pop("overhead", None)
        scheduling = rc.get("scheduling")
        if not isinstance(scheduling, dict):
            return
        wanted = scheduling.get("nodeSelector") or {}
        selector = spec.get("nodeSelector")
        if not isinstance(selector, dict):
            selector = None
        if selector is None:
            selector = dict(wanted) if wanted else None
        else:
            for key, value in wanted.items():
                if key in selector and selector[key] != value:
                    raise self._forbidden(
                        attrs,
                        f"conflict: runtimeClass.scheduling.nodeSelector[{key}] = {value}; "
                        f"pod.spec.nodeSelector[{key}] = {selector[key]}",
                    )
                selector[key] = value
        if selector is not None:
            spec["nodeSelector"] = selector
        merged = tol.merge(list(spec.get("tolerations") or []), list(scheduling.get("tolerations") or []))
        if merged:
            spec["tolerations"] = merged

    async def validate(self, attrs: Attributes) -> None:
        found = await self._runtime_class(attrs)
        if found is None:
            return
        spec, rc = found
        if rc is not None and rc.get("overhead") is not None:
            if not same_resources((rc.get("overhead") or {}).get("podFixed"), spec.get("overhead")):
                raise self._forbidden(attrs, OVERHEAD_MISMATCH)
        elif spec.get("overhead"):
            raise self._forbidden(attrs, OVERHEAD_WITHOUT_CLASS)

    @staticmethod
    def _forbidden(attrs: Attributes, message: str) -> st.ApiError:
        return st.forbidden(attrs.kind.resource, attrs.name, attrs.kind.group, message)


def plugin(server: Any) -> RuntimeClassAdmission:
    return RuntimeClassAdmission(server.store, server.cache, server.registry)
