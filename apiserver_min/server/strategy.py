"""Registry strategies: what each kind does on create, update and status update.

The generic store calls a kind's strategy to prepare an object (system fields,
status reset, generation) and to validate it. Generic rules (object metadata)
live in :class:`Strategy`; a kind overrides only what differs. Kind-specific
field validation grows here as the schema work lands.
"""

from __future__ import annotations

import copy
import secrets
import uuid
from typing import Any

from ..api import names
from ..api import podvalidation
from ..api import validation as v
from ..api.kinds import KindInfo
from ..api.timeutil import format_rfc3339, now

_GENERATE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def generate_suffix(n: int = 5) -> str:
    return "".join(secrets.choice(_GENERATE_ALPHABET) for _ in range(n))


def timestamp() -> str:
    return format_rfc3339(now())


def _cause(err: v.FieldError) -> dict:
    return {"reason": err.type, "message": err.body(), "field": err.field}


def causes(errors: list[v.FieldError]) -> list[dict]:
    return [_cause(e) for e in errors]


def _spec_part(obj: dict) -> dict:
    return {k: val for k, val in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")}


class Strategy:
    name_rule = "subdomain"  # subdomain | label | dns1035 | path_segment
    has_status = False
    # Whether create keeps a client-given status (nodes) or resets it.
    keep_status_on_create = False

    def __init__(self, kind: KindInfo):
        self.kind = kind
        self.has_status = kind.subresource("status") is not None

    # --- create -------------------------------------------------------------------
    def prepare_for_create(self, obj: dict) -> None:
        md = obj.setdefault("metadata", {})
        md["uid"] = str(uuid.uuid4())
        md["creationTimestamp"] = timestamp()
        md["generation"] = 1
        for f in ("deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"):
            md.pop(f, None)
        if self.has_status and not self.keep_status_on_create:
            obj.pop("status", None)
            initial = self.initial_status(obj)
            if initial is not None:
                obj["status"] = initial

    def initial_status(self, obj: dict) -> dict | None:
        return None

    # --- update -------------------------------------------------------------------
    def prepare_for_update(self, new: dict, old: dict) -> None:
        """An update of the main resource: status comes from the old object."""
        if self.has_status:
            if "status" in old:
                new["status"] = copy.deepcopy(old["status"])
            else:
                new.pop("status", None)
        self.keep_system_metadata(new, old)
        md = new["metadata"]
        if _spec_part(new) != _spec_part(old):
            md["generation"] = int(old["metadata"].get("generation", 1) or 1) + 1
        else:
            md["generation"] = old["metadata"].get("generation", 1)

    def prepare_for_status_update(self, new: dict, old: dict) -> None:
        """An update through the status sub-resource: only status may change."""
        out = copy.deepcopy(old)
        if "status" in new:
            out["status"] = new["status"]
        else:
            out.pop("status", None)
        out["metadata"]["resourceVersion"] = (new.get("metadata") or {}).get("resourceVersion", "")
        new.clear()
        new.update(out)

    @staticmethod
    def keep_system_metadata(new: dict, old: dict) -> None:
        md, omd = new.setdefault("metadata", {}), old["metadata"]
        for f in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds",
                  "name", "namespace", "generateName"):
            if f in omd:
                md[f] = omd[f]
            else:
                md.pop(f, None)

    # --- validation ---------------------------------------------------------------
    def validate_name(self, name: str, path: str = "metadata.name") -> list[v.FieldError]:
        return v.validate_object_name(name, path, self.name_rule)

    def validate(self, obj: dict) -> list[v.FieldError]:
        return self.validate_metadata(obj)

    def validate_update(self, new: dict, old: dict) -> list[v.FieldError]:
        errs = self.validate(new)
        omd, md = old["metadata"], new["metadata"]
        if omd.get("deletionTimestamp"):
            added = set(md.get("finalizers") or []) - set(omd.get("finalizers") or [])
            if added:
                errs.append(v.FieldError.forbidden(
                    "metadata.finalizers", "no new finalizers can be added if the object is being deleted, "
                    f"found new finalizers {sorted(added)!r}"))
        return errs

    def validate_metadata(self, obj: dict) -> list[v.FieldError]:
        errs: list[v.FieldError] = []
        md = obj.get("metadata")
        if not isinstance(md, dict):
            return [v.FieldError.required("metadata")]
        name = md.get("name", "")
        if not isinstance(name, str):
            errs.append(v.FieldError.type_invalid("metadata.name", name, "must be a string"))
        elif not name:
            errs.append(v.FieldError.required("metadata.name", "name or generateName is required"))
        else:
            errs += self.validate_name(name)
        ns = md.get("namespace", "")
        if self.kind.namespaced:
            if not ns:
                errs.append(v.FieldError.required("metadata.namespace"))
            else:
                errs += v.validate_object_name(ns, "metadata.namespace", "label")
        elif ns:
            errs.append(v.FieldError.forbidden("metadata.namespace", "not allowed on this type"))
        labels = md.get("labels")
        if labels is not None:
            if not isinstance(labels, dict) or not all(isinstance(x, str) for x in labels.values()):
                errs.append(v.FieldError.type_invalid("metadata.labels", labels, "must be a map of strings"))
            else:
                errs += v.validate_labels(labels, "metadata.labels")
        annotations = md.get("annotations")
        if annotations is not None:
            if not isinstance(annotations, dict) or not all(isinstance(x, str) for x in annotations.values()):
                errs.append(v.FieldError.type_invalid("metadata.annotations", annotations,
                                                      "must be a map of strings"))
            else:
                errs += v.validate_annotations(annotations, "metadata.annotations")
        fin = md.get("finalizers")
        if fin is not None:
            if not isinstance(fin, list) or not all(isinstance(x, str) for x in fin):
                errs.append(v.FieldError.type_invalid("metadata.finalizers", fin, "must be a list of strings"))
            else:
                for i, f in enumerate(fin):
                    for problem in v.is_qualified_name(f):
                        errs.append(v.FieldError.invalid(f"metadata.finalizers[{i}]", f, problem))
        owners = md.get("ownerReferences")
        if owners is not None:
            if not isinstance(owners, list):
                errs.append(v.FieldError.type_invalid("metadata.ownerReferences", owners, "must be a list"))
            else:
                controllers = 0
                for i, ref in enumerate(owners):
                    p = f"metadata.ownerReferences[{i}]"
                    if not isinstance(ref, dict):
                        errs.append(v.FieldError.type_invalid(p, ref, "must be an object"))
                        continue
                    for f in ("apiVersion", "kind", "name", "uid"):
                        if not ref.get(f):
                            errs.append(v.FieldError.required(f"{p}.{f}"))
                    if ref.get("controller"):
                        controllers += 1
                if controllers > 1:
                    errs.append(v.FieldError.invalid("metadata.ownerReferences", owners,
                                                     "Only one reference can have Controller set to true"))
        return errs


class NamespaceStrategy(Strategy):
    name_rule = "label"

    def prepare_for_create(self, obj: dict) -> None:
        super().prepare_for_create(obj)
        spec = obj.setdefault("spec", {})
        fins = list(spec.get("finalizers") or [])
        if names.FINALIZER_NAMESPACE not in fins:
            fins.append(names.FINALIZER_NAMESPACE)
        spec["finalizers"] = fins
        labels = obj["metadata"].setdefault("labels", {})
        labels[names.LABEL_METADATA_NAME] = obj["metadata"]["name"]

    def initial_status(self, obj: dict) -> dict:
        return {"phase": "Active"}

    def prepare_for_update(self, new: dict, old: dict) -> None:
        super().prepare_for_update(new, old)
        new.setdefault("spec", {})["finalizers"] = list((old.get("spec") or {}).get("finalizers") or [])
        new["metadata"].setdefault("labels", {})[names.LABEL_METADATA_NAME] = new["metadata"]["name"]


class PodStrategy(Strategy):
    def initial_status(self, obj: dict) -> dict:
        return {"phase": "Pending", "qosClass": qos_class(obj)}

    def validate(self, obj: dict) -> list[v.FieldError]:
        """Create: generic metadata rules plus upstream's ValidatePodCreate."""
        return super().validate(obj) + podvalidation.validate_pod(obj, include_metadata=False)

    def validate_update(self, new: dict, old: dict) -> list[v.FieldError]:
        """Update: generic metadata rules plus upstream's ValidatePodUpdate.

        The base rules call ``self.validate(new)``, which carries the
        create-only pod rules (e.g. no ephemeral containers); those are taken
        out again. Writes that change status (the status sub-resource, and
        binding, which also sets spec.nodeName) are internal writes that
        upstream does not run through ValidatePodUpdate: ``prepare_for_update``
        copies the old status into every main-resource update, so a status
        difference marks exactly those writes.
        """
        create_only = podvalidation.validate_pod(new, include_metadata=False)
        errs = [e for e in super().validate_update(new, old) if e not in create_only]
        if new.get("status") != old.get("status"):
            return errs
        return errs + podvalidation.validate_pod_update(new, old, include_metadata=False)


def qos_class(pod: dict) -> str:
    """Guaranteed, Burstable or BestEffort, from the containers' requests and limits."""
    containers = list((pod.get("spec") or {}).get("containers") or []) + \
        list((pod.get("spec") or {}).get("initContainers") or [])
    requests: dict[str, Any] = {}
    limits: dict[str, Any] = {}
    guaranteed = True
    any_set = False
    for c in containers:
        if not isinstance(c, dict):
            continue
        res = c.get("resources") or {}
        req, lim = res.get("requests") or {}, res.get("limits") or {}
        for r in ("cpu", "memory"):
            if req.get(r) not in (None, "", "0", 0):
                any_set = True
                requests[r] = req[r]
            if lim.get(r) not in (None, "", "0", 0):
                any_set = True
                limits[r] = lim[r]
            lim_v, req_v = lim.get(r), req.get(r, lim.get(r))
            if lim_v in (None, "") or str(req_v) != str(lim_v):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


class NodeStrategy(Strategy):
    keep_status_on_create = True


class ServiceStrategy(Strategy):
    name_rule = "dns1035"

    def initial_status(self, obj: dict) -> dict:
        return {"loadBalancer": {}}


class PathNameStrategy(Strategy):
    name_rule = "path_segment"


class CsrStrategy(PathNameStrategy):
    def initial_status(self, obj: dict) -> dict | None:
        return None


_STRATEGIES: dict[tuple[str, str], type[Strategy]] = {
    ("", "namespaces"): NamespaceStrategy,
    ("", "pods"): PodStrategy,
    ("", "nodes"): NodeStrategy,
    ("", "services"): ServiceStrategy,
    (names.RBAC_GROUP, "roles"): PathNameStrategy,
    (names.RBAC_GROUP, "rolebindings"): PathNameStrategy,
    (names.RBAC_GROUP, "clusterroles"): PathNameStrategy,
    (names.RBAC_GROUP, "clusterrolebindings"): PathNameStrategy,
    (names.CERTIFICATES_GROUP, "certificatesigningrequests"): CsrStrategy,
}


def strategy_for(kind: KindInfo) -> Strategy:
    return _STRATEGIES.get((kind.group, kind.resource), Strategy)(kind)
