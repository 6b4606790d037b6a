"""The base strategy: what the generic store asks of a kind on create, update and
status update.

The generic store calls a kind's strategy to prepare an object (system fields,
status reset, generation) and to validate it. Generic rules (object metadata)
live in :class:`Strategy`; each kind family's module (``core``, ``certificates``,
``admissionregistration``) overrides only what differs, and ``families`` says
which strategy serves which kind.
"""

from __future__ import annotations

import secrets
from typing import Any, Protocol

from ..api import enumvalidation
from ..api import validation as v
from ..api.helpers import json_copy, new_uid, timestamp
from ..api.kinds import KindInfo
from ..api.schemas import schema_for

_GENERATE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def generate_suffix(n: int = 5) -> str:
    """``n`` characters drawn uniformly from the alphabet: one random draw read as
    base-27 digits (the same distribution as ``n`` separate draws, at one fifth of
    the cost; every pod create with a token volume pays it)."""
    x = secrets.randbelow(len(_GENERATE_ALPHABET) ** n)
    out = []
    for _ in range(n):
        x, r = divmod(x, len(_GENERATE_ALPHABET))
        out.append(_GENERATE_ALPHABET[r])
    return "".join(out)


class WriteTransaction(Protocol):
    async def commit(self) -> None: ...
    async def revert(self) -> None: ...


def _spec_part(obj: dict) -> dict:
    return {k: val for k, val in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")}


class Strategy:
    name_rule = "subdomain"  # subdomain | label | dns1035 | path_segment
    has_status = False
    # Whether create keeps a client-given status (nodes) or resets it.
    keep_status_on_create = False
    # The enumerated fields this kind's validation enforces (api/enumvalidation.py).
    enum_rules: enumvalidation.Rules = enumvalidation.RULES
    # What a delete naming no propagation policy does with dependents (None: Background).
    default_propagation: str | None = None
    # Sub-resources (beyond status and its kin) whose writes this strategy prepares and
    # validates itself: prepare_for_subresource_update, validate_subresource_update.
    own_subresources: frozenset[str] = frozenset()

    def __init__(self, kind: KindInfo):
        self.kind = kind
        self.has_status = kind.subresource("status") is not None
        self.schema = schema_for(kind.group, kind.version, kind.kind)

    # --- create -------------------------------------------------------------------
    def prepare_for_create(self, obj: dict) -> None:
        md = obj.setdefault("metadata", {})
        md["uid"] = new_uid()
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

    def prepare_for_request(self, obj: dict, old: dict | None, user: Any, subresource: str) -> None:
        """The part of preparing a create (``old`` None) or an update that needs the
        request: who writes (``user``) and through which sub-resource. The store calls
        it after recording managedFields (so what it fills is not the writer's) and
        again whenever it prepares the object again."""

    # --- around the write ------------------------------------------------------------
    async def begin_create(self, obj: dict, dry_run: bool) -> WriteTransaction | None:
        """Take what the object needs from outside itself (a Service's addresses and
        ports) just before validation; the store commits the returned transaction once
        the write landed and reverts it when anything fails."""
        return None

    async def begin_update(self, new: dict, old: dict, dry_run: bool) -> WriteTransaction | None:
        """As :meth:`begin_create`, for an update of the main resource."""
        return None

    async def after_delete(self, obj: dict, store: Any) -> None:
        """The object is gone from storage: give back what it held, remove what only
        it used (``store``: the generic store it was deleted from)."""

    # --- update -------------------------------------------------------------------
    def prepare_for_update(self, new: dict, old: dict) -> None:
        """An update of the main resource: status comes from the old object."""
        if self.has_status:
            if "status" in old:
                new["status"] = json_copy(old["status"])
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
        out = json_copy(old)
        if "status" in new:
            out["status"] = new["status"]
        else:
            out.pop("status", None)
        out["metadata"]["resourceVersion"] = (new.get("metadata") or {}).get("resourceVersion", "")
        new.clear()
        new.update(out)

    def prepare_for_subresource_update(self, subresource: str, new: dict, old: dict) -> None:
        """A write through one of :attr:`own_subresources`: what of ``new`` it may
        change (idempotent: the store runs it again after mutating admission)."""
        raise NotImplementedError(f"{self.kind.resource}/{subresource} names no preparation")

    def validate_subresource_update(self, subresource: str, new: dict, old: dict) -> list[v.FieldError]:
        """Validation of a write through one of :attr:`own_subresources`."""
        return self.validate_update(new, old)

    def validate_status_update(self, new: dict, old: dict) -> list[v.FieldError]:
        """Validation of a write through the ``status`` sub-resource (after
        :meth:`prepare_for_status_update`); kinds with status rules of their own override it."""
        return self.validate_update(new, old)

    @staticmethod
    def keep_system_metadata(new: dict, old: dict) -> None:
        md, omd = new.setdefault("metadata", {}), old["metadata"]
        for f in (
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "name",
            "namespace",
            "generateName",
        ):
            if f in omd:
                md[f] = omd[f]
            else:
                md.pop(f, None)

    # --- validation ---------------------------------------------------------------
    def validate_name(self, name: str, path: str = "metadata.name") -> list[v.FieldError]:
        return v.validate_object_name(name, path, self.name_rule)

    def validate(self, obj: dict) -> list[v.FieldError]:
        return self.validate_metadata(obj) + self.validate_enums(obj)

    def validate_enums(self, obj: dict) -> list[v.FieldError]:
        return enumvalidation.validate(self.schema, obj, self.enum_rules)

    async def to_storage(self, obj: dict) -> None:
        """The object as it is stored, in place (a custom resource: in its storage version)."""

    async def old_for_validation(self, new: dict, old: dict) -> dict:
        """The stored object as update validation compares ``new`` with it (a custom
        resource: in ``new``'s version); ``old`` itself is left as it is."""
        return old

    def unknown_fields(self, obj: dict) -> list[str] | None:
        """For a kind whose schema is not a declared struct (a custom resource): the
        paths of the fields ``obj`` has and the schema does not, which field validation
        reports. None: the declared struct is the schema (the HTTP layer checks it)."""
        return None

    def validate_update(self, new: dict, old: dict) -> list[v.FieldError]:
        return self.without_stored_enum_errors(self.validate(new) + self._finalizer_update_errors(new, old), old)

    def without_stored_enum_errors(self, errs: list[v.FieldError], old: dict) -> list[v.FieldError]:
        """An enumerated value the stored object already had (stored before these checks
        existed) does not block updates that leave it alone, such as status writes."""
        if errs:
            before = {(e.type, e.field, repr(e.value)) for e in self.validate_enums(old)}
            if before:
                errs = [e for e in errs if (e.type, e.field, repr(e.value)) not in before]
        return errs

    @staticmethod
    def _finalizer_update_errors(new: dict, old: dict) -> list[v.FieldError]:
        errs: list[v.FieldError] = []
        omd, md = old["metadata"], new["metadata"]
        if omd.get("deletionTimestamp"):
            added = set(md.get("finalizers") or []) - set(omd.get("finalizers") or [])
            if added:
                errs.append(
                    v.FieldError.forbidden(
                        "metadata.finalizers",
                        "no new finalizers can be added if the object is being deleted, "
                        f"found new finalizers {sorted(added)!r}",
                    )
                )
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
                errs.append(v.FieldError.type_invalid("metadata.annotations", annotations, "must be a map of strings"))
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
                    errs.append(
                        v.FieldError.invalid(
                            "metadata.ownerReferences", owners, "Only one reference can have Controller set to true"
                        )
                    )
        return errs


class PathNameStrategy(Strategy):
    name_rule = "path_segment"
