"""The kinds a definition defines, and how the generic store serves their objects.

One :class:`~apiserver_min.api.kinds.KindInfo` per served version (all sharing one
storage prefix, ``/<group>/<plural>/``); objects are stored in the storage version
(``None`` conversion: only ``apiVersion`` changes between versions; ``Webhook``: the
definition's conversion webhook converts them, see ``conversion``). On every write
the object is pruned to its version's schema, defaulted and validated with it.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import re
from typing import Any

from ..api import names
from ..api import status as st
from ..api import validation as v
from ..api.kinds import AGE, NAME, Column, KindInfo, Subresource, age, dig
from ..api.schema import OBJECT_META
from ..registry.rest import ObjectStore
from ..registry.scale import ScaleREST
from ..registry.strategy import Strategy, WriteTransaction
from . import rules, values
from .conversion import ConversionError, WebhookConverter
from .definition import storage_version

_SCALE = Subresource("scale", "Scale", ("get", "patch", "update"), names.AUTOSCALING_GROUP, "v1", rest="scale")
_STATUS_VERBS = ("get", "patch", "update")
_OBJECT_META_FIELDS = frozenset(OBJECT_META.json_fields())


@dataclasses.dataclass(frozen=True)
class Served:
    """What one served version of a definition needs to serve its objects."""

    version: str
    schema: dict | None
    status: bool
    scale: dict | None
    columns: tuple[dict, ...]


@dataclasses.dataclass(frozen=True)
class Definition:
    """The parts of an accepted definition the server serves from."""

    name: str
    uid: str
    group: str
    plural: str
    singular: str
    kind: str
    list_kind: str
    short_names: tuple[str, ...]
    categories: tuple[str, ...]
    namespaced: bool
    storage: str
    versions: tuple[Served, ...]
    terminating: bool = False  # being deleted: its objects are deleted, none created
    # spec.conversion as JSON: a definition whose conversion changed is served again.
    conversion: str = ""
    # The conversion webhook (strategy Webhook), None: versions differ only in apiVersion.
    converter: WebhookConverter | None = dataclasses.field(default=None, compare=False)

    @classmethod
    def from_object(cls, crd: dict) -> "Definition":
        spec = crd.get("spec") or {}
        accepted = (crd.get("status") or {}).get("acceptedNames") or {}
        nm = accepted if accepted.get("plural") and accepted.get("kind") else spec.get("names") or {}
        kind = nm.get("kind", "")
        served = []
        for ver in spec.get("versions") or ():
            if not ver.get("served"):
                continue
            subs = ver.get("subresources") or {}
            served.append(
                Served(
                    ver["name"],
                    ((ver.get("schema") or {}).get("openAPIV3Schema")),
                    subs.get("status") is not None,
                    subs.get("scale"),
                    tuple(ver.get("additionalPrinterColumns") or ()),
                )
            )
        return cls(
            (crd.get("metadata") or {}).get("name", ""),
            (crd.get("metadata") or {}).get("uid", ""),
            spec.get("group", ""),
            nm.get("plural", ""),
            nm.get("singular") or kind.lower(),
            kind,
            nm.get("listKind") or kind + "List",
            tuple(nm.get("shortNames") or ()),
            tuple(nm.get("categories") or ()),
            spec.get("scope") == "Namespaced",
            storage_version(crd),
            tuple(served),
            conversion=json.dumps(spec.get("conversion"), sort_keys=True),
            converter=_converter(spec),
        )

    def served(self, version: str) -> Served | None:
        for s in self.versions:
            if s.version == version:
                return s
        return None

    def kinds(self) -> list[KindInfo]:
        return [self.kind_info(s) for s in self.versions]

    def kind_info(self, s: Served) -> KindInfo:
        subs: list[Subresource] = []
        if s.status:
            subs.append(Subresource("status", self.kind, _STATUS_VERBS))
        if s.scale is not None:
            subs.append(_SCALE)
        return KindInfo(
            self.group,
            s.version,
            self.plural,
            self.kind,
            self.namespaced,
            singular=self.singular,
            short_names=self.short_names,
            subresources=tuple(subs),
            categories=self.categories,
            columns=printer_columns(s.columns),
            custom=True,
            custom_list_kind=self.list_kind,
            custom_storage_version=self.storage,
            custom_schema=s.schema,
            custom_converter=self.converter,
        )


def _converter(spec: dict) -> WebhookConverter | None:
    conv = spec.get("conversion")
    if not isinstance(conv, dict) or conv.get("strategy") != "Webhook" or not isinstance(conv.get("webhook"), dict):
        return None
    return WebhookConverter(spec.get("group", ""), conv["webhook"])


# --- printer columns ------------------------------------------------------------------------

_STEP = re.compile(r"\.([^.\[\]]+)|\[(\d+)\]")


def parse_path(jp: str) -> list[str | int] | None:
    """A simple JSON path (``.spec.replicas``, ``{.items[0].name}``) as steps."""
    inner = jp[1:-1] if jp.startswith("{") and jp.endswith("}") else jp
    steps: list[str | int] = []
    pos = 0
    while pos < len(inner):
        m = _STEP.match(inner, pos)
        if m is None:
            return None
        steps.append(m.group(1) if m.group(1) is not None else int(m.group(2)))
        pos = m.end()
    return steps


def read_path(obj: Any, jp: str) -> Any:
    steps = parse_path(jp)
    return None if steps is None else dig(obj, *steps)


def _column_cell(jp: str, typ: str):
    steps = parse_path(jp) or []

    def cell(obj: dict) -> Any:
        value = dig(obj, *steps)
        if value is None:
            return None
        if typ == "date" and isinstance(value, str):
            return age(value)
        if isinstance(value, (dict, list)):
            return json.dumps(value, separators=(",", ":"))
        return value

    return cell


def printer_columns(columns: tuple[dict, ...]) -> tuple[Column, ...]:
    """The Table columns: Name, then the definition's columns (Age when it gives none)."""
    if not columns:
        return (NAME, AGE)
    out = [NAME]
    for c in columns:
        typ = c.get("type", "string")
        out.append(
            Column(
                c.get("name", ""),
                typ,
                _column_cell(c.get("jsonPath", ""), typ),
                format=c.get("format", ""),
                description=c.get("description", ""),
                priority=int(c.get("priority", 0) or 0),
            )
        )
    return tuple(out)


# --- the strategy ---------------------------------------------------------------------------


class CustomResourceStrategy(Strategy):
    """Objects of one definition, all its versions (the store keys strategies by storage prefix)."""

    def __init__(self, kind: KindInfo, definition: Definition):
        super().__init__(kind)
        self.definition = definition
        # The status sub-resource is per version; the generic rules follow the storage version's.
        stored = definition.served(definition.storage) or (definition.versions[0] if definition.versions else None)
        self.has_status = bool(stored and stored.status)
        # The compiled validation rules of each version, built once per definition
        # (a changed definition gets a new strategy).
        self._validators: dict[str, rules.Validator | None] = {}

    def _validator(self, obj: dict) -> rules.Validator | None:
        _, _, version = str(obj.get("apiVersion", "")).rpartition("/")
        if version not in self._validators:
            schema = self._schema(obj)
            validator = rules.Validator(schema) if schema is not None else None
            self._validators[version] = validator if validator is not None and not validator.empty else None
        return self._validators[version]

    def _schema(self, obj: dict) -> dict | None:
        _, _, version = str(obj.get("apiVersion", "")).rpartition("/")
        served = self.definition.served(version)
        return served.schema if served is not None else None

    async def begin_create(self, obj: dict, dry_run: bool) -> WriteTransaction | None:
        if self.definition.terminating:
            raise st.method_not_allowed("create not allowed while custom resource definition is terminating")
        return None

    async def to_storage(self, obj: dict) -> None:
        converter = self.definition.converter
        if converter is None:  # None conversion: the versions differ only in apiVersion.
            obj["apiVersion"] = f"{self.definition.group}/{self.definition.storage}"
            return
        try:
            (converted,) = await converter.convert([obj], self.definition.storage)
        except ConversionError as exc:
            raise exc.api_error() from None
        if converted is not obj:
            obj.clear()
            obj.update(converted)

    async def old_for_validation(self, new: dict, old: dict) -> dict:
        """Transition rules compare an update with the stored object in the update's
        version: converted (by the webhook, if the definition has one) and defaulted by
        that version's schema. Only done when that version has transition rules."""
        version = new.get("apiVersion")
        validator = self._validator(new)
        if old.get("apiVersion") == version or validator is None or not validator.has_transition_rules:
            return old
        converter = self.definition.converter
        if converter is None:  # None conversion: the versions differ only in apiVersion.
            seen = copy.deepcopy(old)
            seen["apiVersion"] = version
        else:
            _, _, target = str(version).rpartition("/")
            try:
                (seen,) = await converter.convert([copy.deepcopy(old)], target)
            except ConversionError as exc:
                raise exc.api_error() from None
        values.apply_defaults(seen, self._schema(new))
        return seen

    def unknown_fields(self, obj: dict) -> list[str] | None:
        md = obj.get("metadata")
        extra = [f"metadata.{k}" for k in md if k not in _OBJECT_META_FIELDS] if isinstance(md, dict) else []
        return extra + values.unknown_fields(obj, self._schema(obj))

    def _shape(self, obj: dict) -> None:
        schema = self._schema(obj)
        md = obj.get("metadata")
        if isinstance(md, dict):  # metadata is ObjectMeta whatever the schema says
            for key in [k for k in md if k not in _OBJECT_META_FIELDS]:
                del md[key]
        values.prune(obj, schema)
        values.apply_defaults(obj, schema)

    def prepare_for_create(self, obj: dict) -> None:
        super().prepare_for_create(obj)
        self._shape(obj)

    def prepare_for_update(self, new: dict, old: dict) -> None:
        super().prepare_for_update(new, old)
        self._shape(new)

    def prepare_for_status_update(self, new: dict, old: dict) -> None:
        api_version = new.get("apiVersion")
        super().prepare_for_status_update(new, old)
        if api_version:
            new["apiVersion"] = api_version
        self._shape(new)

    def validate(self, obj: dict) -> list[v.FieldError]:
        return self._validate(obj, None)

    def _validate(self, obj: dict, old: dict | None) -> list[v.FieldError]:
        errs = self.validate_metadata(obj)
        errs += values.validate({k: val for k, val in obj.items() if k != "metadata"}, self._schema(obj))
        validator = self._validator(obj)
        if validator is not None:
            # The rules run on a well-typed object only (as upstream).
            if rules.has_blocking_errors(errs):
                errs.append(v.FieldError.invalid(rules.ROOT_PATH, "null", rules.NOT_CHECKED))
            else:
                errs += validator.validate(obj, old)
        return errs

    def validate_update(self, new: dict, old: dict) -> list[v.FieldError]:
        return self._validate(new, old) + self._finalizer_update_errors(new, old)

    def validate_enums(self, obj: dict) -> list[v.FieldError]:
        return []


class CustomScaleREST(ScaleREST):
    """``<plural>/scale`` of a definition with a scale sub-resource: the Scale reads and
    writes the paths the definition names."""

    def __init__(self, store: ObjectStore, kind: KindInfo, scale: dict):
        super().__init__(store, kind)
        self.spec_path = parse_path(scale.get("specReplicasPath", "")) or []
        self.status_path = parse_path(scale.get("statusReplicasPath", "")) or []
        selector = scale.get("labelSelectorPath")
        self.selector_path = parse_path(selector) if selector else None

    def to_scale(self, obj: dict) -> dict:
        md = obj.get("metadata") or {}
        scale_md = {k: md[k] for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp") if k in md}
        status: dict[str, Any] = {"replicas": dig(obj, *self.status_path, default=0) or 0}
        if self.selector_path is not None:
            sel = dig(obj, *self.selector_path)
            if isinstance(sel, str) and sel:
                status["selector"] = sel
        return {
            "kind": "Scale",
            "apiVersion": "autoscaling/v1",
            "metadata": scale_md,
            "spec": {"replicas": dig(obj, *self.spec_path, default=0) or 0},
            "status": status,
        }

    def set_replicas(self, obj: dict, replicas: int) -> None:
        cur: Any = obj
        for step in self.spec_path[:-1]:
            if not isinstance(step, str):
                return
            nxt = cur.get(step)
            if not isinstance(nxt, dict):
                nxt = cur[step] = {}
            cur = nxt
        if self.spec_path and isinstance(self.spec_path[-1], str):
            cur[self.spec_path[-1]] = replicas
