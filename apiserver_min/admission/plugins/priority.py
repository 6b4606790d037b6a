"""Priority: a new pod's ``spec.priority`` and ``preemptionPolicy`` come from its
PriorityClass (the global default class when it names none; priority 0 when there
is none); only one PriorityClass may be the global default.

As upstream (v1.27): an unknown class, or a given priority or preemption policy
that disagrees with the class, is 403 Forbidden; on pod update the priority the
pod was created with is kept when the update leaves it out."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...api import names
from ...api import status as st
from ...storage.keys import key_prefix, object_key
from ..chain import Attributes

if TYPE_CHECKING:
    from ...api.kinds import KindInfo, Registry
    from ...registry.store import Store
    from ...storage.cacher import WatchCache

DEFAULT_PREEMPTION_POLICY = "PreemptLowerPriority"
# A pod's priority when no class is the global default.
DEFAULT_PRIORITY_WHEN_NO_DEFAULT_CLASS = 0


class Priority:
    name = "Priority"
    resources = frozenset({("", "pods"), (names.SCHEDULING_GROUP, "priorityclasses")})
    operations = frozenset({"CREATE", "UPDATE"})
    complete = True  # priority and preemptionPolicy are plain values nothing derives from

    def __init__(self, store: "Store", cache: "WatchCache", registry: "Registry"):
        self.store = store
        self.cache = cache
        kind = registry.by_resource(names.SCHEDULING_GROUP, "v1", "priorityclasses")
        if kind is None:
            raise LookupError("no kind serves priorityclasses")
        self.kind: KindInfo = kind

    async def _get_class(self, name: str) -> dict | None:
        entry = self.cache.cache(key_prefix(self.kind)).items.get(object_key(self.kind, "", name))
        if entry is not None:
            return entry.object()
        try:  # the cache trails storage by an event: a class created a moment ago counts
            return await self.store.get_object(self.kind, "", name)
        except st.ApiError as exc:
            if exc.code == 404:
                return None
            raise

    def default_class(self) -> dict | None:
        """The global default class; when a race left several, the one of lowest value."""
        found: dict | None = None
        # Stored objects are compact JSON (codec.encode_for_storage): only classes whose
        # bytes say "globalDefault":true can be the default, and only those are decoded.
        entries = self.cache.cache(key_prefix(self.kind)).items.values()
        for pc in [e.object() for e in entries if b'"globalDefault":true' in e.raw]:
            if pc.get("globalDefault") is True and (found is None or _value(pc) < _value(found)):
                found = pc
        return found

    async def admit(self, attrs: Attributes) -> None:
        if attrs.subresource or attrs.kind.resource != "pods" or not isinstance(attrs.obj, dict):
            return
        spec = attrs.obj.get("spec")
        if not isinstance(spec, dict):
            return
        if attrs.operation == "UPDATE":
            old_spec = (attrs.old or {}).get("spec") or {}
            for key in ("priority", "preemptionPolicy"):
                if spec.get(key) is None and old_spec.get(key) is not None:
                    spec[key] = old_spec[key]
            return
        if attrs.operation != "CREATE":
            return
        class_name = spec.get("priorityClassName")
        policy: Any
        if not class_name:
            pc = self.default_class()
            if pc is None:
                priority, policy = DEFAULT_PRIORITY_WHEN_NO_DEFAULT_CLASS, DEFAULT_PREEMPTION_POLICY
            else:
                spec["priorityClassName"] = pc["metadata"]["name"]
                priority, policy = _value(pc), pc.get("preemptionPolicy")
        else:
            found = await self._get_class(str(class_name))
            if found is None:
                raise self._forbidden(attrs, f"no PriorityClass with name {class_name} was found")
            priority, policy = _value(found), found.get("preemptionPolicy")
        given = spec.get("priority")
        if given is not None and given != priority:
            raise self._forbidden(
                attrs,
                f"the integer value of priority ({given}) must not be provided in pod spec; "
                f"priority admission controller computed {priority} from the given PriorityClass name",
            )
        spec["priority"] = priority
        if policy is not None:
            given_policy = spec.get("preemptionPolicy")
            if given_policy is not None and given_policy != policy:
                raise self._forbidden(
                    attrs,
                    f"the string value of PreemptionPolicy ({given_policy}) must not be provided in pod spec; "
                    f"priority admission controller computed {policy} from the given PriorityClass name",
                )
            spec["preemptionPolicy"] = policy

    async def validate(self, attrs: Attributes) -> None:
        k = attrs.kind
        if attrs.subresource or k.resource != "priorityclasses" or attrs.operation not in ("CREATE", "UPDATE"):
            return
        pc = attrs.obj
        if not isinstance(pc, dict) or pc.get("globalDefault") is not True:
            return
        current = self.default_class()
        if current is None:
            return
        current_name = current["metadata"]["name"]
        if attrs.operation == "CREATE" or current_name != attrs.name:
            raise self._forbidden(
                attrs, f"PriorityClass {current_name} is already marked as default. Only one default can exist"
            )

    @staticmethod
    def _forbidden(attrs: Attributes, message: str) -> st.ApiError:
        return st.forbidden(attrs.kind.resource, attrs.name, attrs.kind.group, message)


def _value(pc: dict) -> int:
    v = pc.get("value")
    return v if isinstance(v, int) and not isinstance(v, bool) else 0


def plugin(server: Any) -> Priority:
    return Priority(server.store, server.cache, server.registry)
