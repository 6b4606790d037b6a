"""The types validation rules see ``self`` and ``oldSelf`` with when a definition is
written, from the schema node the rule sits on, so that a rule misusing a field
(``self.replicas > 'a'`` on an integer) is refused with the compiler's message.

Objects with properties become protobuf message types (built here as file
descriptors, one file per node; property names escaped as rules read them), maps
(``additionalProperties``) and lists keep their element types, scalars theirs. What a
schema leaves open (int-or-string, preserved unknown fields, nullable and untyped nodes,
strings whose format the rules would see as another type) is ``dyn``: never refused here.
These types only check rules; evaluation sees the values as JSON, as before.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from google.protobuf import descriptor_pb2

from ..cel import TypeSpec
from . import values

_F = descriptor_pb2.FieldDescriptorProto
_DYN: TypeSpec = ("dyn",)
_VALUE = ".google.protobuf.Value"
_SCALAR_FIELDS = {
    "int": _F.TYPE_INT64,
    "double": _F.TYPE_DOUBLE,
    "string": _F.TYPE_STRING,
    "bool": _F.TYPE_BOOL,
}
# Formats that make a string another type to rules upstream (bytes, durations, times):
# left open here.
_OTHER_TYPED_FORMATS = frozenset({"byte", "duration", "date", "date-time"})
# What leaves a node's type open: int-or-string, kept unknown fields, and null allowed
# beside the type (rules compare such a value with null).
_OPEN = (values.INT_OR_STRING, values.PRESERVE, "nullable")
_META = {"type": "object", "properties": {"name": {"type": "string"}, "generateName": {"type": "string"}}}


def _map_entry_name(field: str) -> str:
    """The name protobuf requires of a map field's entry type (``foo_bar`` -> ``FooBarEntry``)."""
    out: list[str] = []
    cap = True
    for ch in field:
        if ch == "_":
            cap = True
        elif cap:
            out.append(ch.upper())
            cap = False
        else:
            out.append(ch)
    return "".join(out) + "Entry"


class _Builder:
    def __init__(self, package: str, escape: Any):
        self.package = package
        self.escape = escape
        self.file = descriptor_pb2.FileDescriptorProto(
            name=f"{package.replace('.', '/')}.proto",
            package=package,
            syntax="proto2",
            dependency=["google/protobuf/struct.proto"],
        )

    def spec(self, node: Any, embedded: bool = False) -> TypeSpec:
        if not isinstance(node, dict) or any(node.get(k) for k in _OPEN):
            return _DYN
        typ = node.get("type")
        if typ == "integer":
            return ("int",)
        if typ == "number":
            return ("double",)
        if typ == "boolean":
            return ("bool",)
        if typ == "string":
            return _DYN if node.get("format") in _OTHER_TYPED_FORMATS else ("string",)
        if typ == "array":
            return ("list", self.spec(node.get("items")))
        if typ == "object":
            addl = node.get("additionalProperties")
            if isinstance(addl, dict):
                return ("map", ("string",), self.spec(addl))
            if addl is True:
                return ("map", ("string",), _DYN)
            return ("message", self.message(node, embedded or bool(node.get(values.EMBEDDED))))
        return _DYN

    def message(self, node: dict, embedded: bool) -> str:
        name = f"Object{len(self.file.message_type) + 1}"
        msg = self.file.message_type.add(name=name)
        props = dict(node.get("properties") or {})
        if embedded:
            props.setdefault("apiVersion", {"type": "string"})
            props.setdefault("kind", {"type": "string"})
            props["metadata"] = _META
        number = 0
        for prop, sub in props.items():
            field = self.escape(prop)
            if field is None:
                continue  # rules cannot read it
            number += 1
            self._field(msg, field, number, self.spec(sub))
        return f"{self.package}.{name}"

    def _field(self, msg: Any, name: str, number: int, spec: TypeSpec) -> None:
        label = _F.LABEL_OPTIONAL
        if spec[0] == "list":
            label, spec = _F.LABEL_REPEATED, spec[1]
            if spec[0] in ("list", "map"):
                spec = _DYN
        elif spec[0] == "map" and any(t.name == _map_entry_name(name) for t in msg.nested_type):
            spec = _DYN  # two map fields whose entry types protobuf would name alike
        elif spec[0] == "map":
            entry_short = _map_entry_name(name)
            entry = msg.nested_type.add(name=entry_short)
            entry.options.map_entry = True
            entry.field.add(name="key", number=1, type=_F.TYPE_STRING, label=_F.LABEL_OPTIONAL)
            value = spec[2] if spec[2][0] not in ("list", "map") else _DYN
            self._typed(entry.field.add(name="value", number=2, label=_F.LABEL_OPTIONAL), value)
            entry_name = f".{self.package}.{msg.name}.{entry_short}"
            msg.field.add(
                name=name,
                number=number,
                json_name=f"f{number}",
                type=_F.TYPE_MESSAGE,
                type_name=entry_name,
                label=_F.LABEL_REPEATED,
            )
            return
        # Distinct JSON names: protobuf refuses fields whose derived ones clash (a_b, aB).
        self._typed(msg.field.add(name=name, number=number, json_name=f"f{number}", label=label), spec)

    @staticmethod
    def _typed(field: Any, spec: TypeSpec) -> None:
        if spec[0] in _SCALAR_FIELDS:
            field.type = _SCALAR_FIELDS[spec[0]]
        elif spec[0] == "message":
            field.type, field.type_name = _F.TYPE_MESSAGE, f".{spec[1]}"
        else:
            field.type, field.type_name = _F.TYPE_MESSAGE, _VALUE


def declare(node: dict, escape: Any, root: bool) -> tuple[TypeSpec, bytes, str | None]:
    """The type of ``self`` at ``node``, the serialized file descriptor of the message
    types it uses (``escape``: a property name as rules read it, or None), and an
    expression that compiles only when the engine took those types (None: nothing to
    probe)."""
    digest = hashlib.sha256(json.dumps([node, root], sort_keys=True, default=str).encode()).hexdigest()[:16]
    builder = _Builder(f"orch.crd.s{digest}", escape)
    spec = builder.spec(node, embedded=root)
    probe = None
    if spec[0] == "message" and builder.file.message_type[0].field:
        probe = f"has(self.{builder.file.message_type[0].field[0].name})"
    return spec, builder.file.SerializeToString(), probe
