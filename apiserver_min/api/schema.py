"""A small declarative type system for the served kinds.

Every write path needs to know each kind's fields: field validation, strategic
merge patch, server-side apply (managedFields), OpenAPI and protobuf all read
the declarations made with these types (in ``apiserver_min.api.schemas``), and
nothing else lists fields.

The facts recorded are upstream's (v1.27) protocol facts:

* JSON names and value types;
* protobuf field numbers and the full name of the upstream proto message of
  every struct (``k8s.io.api.core.v1.PodSpec``) -- these are wire facts and
  keep their upstream spelling even where group names are rewritten;
* whether the Go field is a pointer (``pointer=True``): upstream's generated
  marshaller emits a non-pointer scalar or struct field always, even when it
  is zero or empty, and a pointer field only when set; lists and maps are
  emitted per element, so ``pointer`` means nothing for them;
* fields embedded with ``json:",inline"`` (``inline=True``): one nested
  message on the wire, flattened into the parent in JSON;
* list semantics (``+listType``/``+listMapKey``), strategic-merge markers
  (``+patchStrategy``/``+patchMergeKey``), map and struct atomicity
  (``+mapType``/``+structType``), required-ness (upstream's OpenAPI
  ``required``: a JSON tag without ``omitempty`` and no ``+optional``) and
  enumerations.

Types are immutable and compared by identity for structs; a struct is
declared once and shared by every field that uses it.

Value representation in JSON (what the server stores and serves):

==============  =====================================  ===============================
type            JSON                                   protobuf (upstream)
==============  =====================================  ===============================
String          string                                 string
Integer(32|64)  number (integral)                      int32 / int64 varint
Number          number                                 double
Boolean         true/false                             bool varint
Bytes           base64 string                          bytes
Time            RFC 3339, whole seconds                meta.v1.Time {seconds=1, nanos=2}
MicroTime       RFC 3339, 6 fractional digits          meta.v1.MicroTime {seconds=1, nanos=2}
Duration        Go duration string ("1h2m3s")          meta.v1.Duration {duration=1 int64 ns}
Quantity        string (or number on input)            resource.Quantity {string=1}
IntOrString     number or string                       intstr.IntOrString {type=1, intVal=2, strVal=3}
Opaque          any JSON value, kept as is             message ``Opaque.message`` {bytes=1: the JSON}
Map             object with string keys                map<string, V>
List            array                                  repeated (or ``List.wrapper`` message {items=1})
Struct          object                                 message ``Struct.name``
==============  =====================================  ===============================
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable, Iterator, Sequence, Union

__all__ = [
    "Type",
    "String",
    "Integer",
    "Number",
    "Boolean",
    "Bytes",
    "Time",
    "MicroTime",
    "Duration",
    "Quantity",
    "IntOrString",
    "Opaque",
    "Map",
    "List",
    "Struct",
    "Field",
    "RAW_EXTENSION",
    "FIELDS_V1",
    "SCALAR_TYPES",
    "is_scalar",
    "iter_structs",
    "iter_fields",
    "resolve_path",
    "resolve_field",
    "split_path",
    "proto_package",
    "TYPE_META",
    "OBJECT_META",
    "LIST_META",
    "OWNER_REFERENCE",
    "MANAGED_FIELDS_ENTRY",
    "LABEL_SELECTOR",
    "LABEL_SELECTOR_REQUIREMENT",
    "CONDITION",
    "STATUS",
    "STATUS_DETAILS",
    "STATUS_CAUSE",
    "DELETE_OPTIONS",
    "PRECONDITIONS",
    "META",
    "TYPE_META_JSON_FIELDS",
]

META = "k8s.io.apimachinery.pkg.apis.meta.v1"
RAW_EXTENSION = "k8s.io.apimachinery.pkg.runtime.RawExtension"
FIELDS_V1 = f"{META}.FieldsV1"


class Type:
    """Base of every schema type. ``kind`` names the type for dispatch."""

    kind: str = ""
    scalar: bool = True

    def __repr__(self) -> str:  # short, so that errors naming types stay readable
        return f"{type(self).__name__}()"


# --- scalars -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, repr=False)
class String(Type):
    """A string. ``enum`` lists upstream's allowed values (informative: per-kind
    validation reports unsupported values, the type check does not);
    ``format`` is the OpenAPI format where upstream has one."""

    enum: tuple[str, ...] | None = None
    format: str | None = None
    kind = "string"

    def __post_init__(self) -> None:
        if self.enum is not None and not isinstance(self.enum, tuple):
            object.__setattr__(self, "enum", tuple(self.enum))

    def __repr__(self) -> str:
        return f"String(enum={self.enum!r})" if self.enum else "String()"


@dataclasses.dataclass(frozen=True, repr=False)
class Integer(Type):
    bits: int = 32
    kind = "integer"

    def __post_init__(self) -> None:
        if self.bits not in (32, 64):
            raise ValueError(f"Integer bits must be 32 or 64, not {self.bits}")

    @property
    def format(self) -> str:
        return f"int{self.bits}"

    @property
    def minimum(self) -> int:
        return -(1 << (self.bits - 1))

    @property
    def maximum(self) -> int:
        return (1 << (self.bits - 1)) - 1

    def __repr__(self) -> str:
        return f"Integer({self.bits})"


@dataclasses.dataclass(frozen=True, repr=False)
class Number(Type):
    """A float (proto double)."""

    kind = "number"
    format = "double"


@dataclasses.dataclass(frozen=True, repr=False)
class Boolean(Type):
    kind = "boolean"


@dataclasses.dataclass(frozen=True, repr=False)
class Bytes(Type):
    """Binary data: base64 text in JSON, raw bytes in protobuf."""

    kind = "bytes"
    format = "byte"


@dataclasses.dataclass(frozen=True, repr=False)
class Time(Type):
    """metav1.Time: RFC 3339 with whole seconds."""

    kind = "time"
    format = "date-time"
    message = f"{META}.Time"


@dataclasses.dataclass(frozen=True, repr=False)
class MicroTime(Type):
    """metav1.MicroTime: RFC 3339 with microseconds."""

    kind = "microtime"
    format = "date-time"
    message = f"{META}.MicroTime"


@dataclasses.dataclass(frozen=True, repr=False)
class Duration(Type):
    """metav1.Duration: a Go duration string in JSON, int64 nanoseconds on the wire."""

    kind = "duration"
    message = f"{META}.Duration"


@dataclasses.dataclass(frozen=True, repr=False)
class Quantity(Type):
    """resource.Quantity: a string in JSON (numbers accepted on input)."""

    kind = "quantity"
    message = "k8s.io.apimachinery.pkg.api.resource.Quantity"


@dataclasses.dataclass(frozen=True, repr=False)
class IntOrString(Type):
    kind = "int-or-string"
    message = "k8s.io.apimachinery.pkg.util.intstr.IntOrString"


@dataclasses.dataclass(frozen=True, repr=False)
class Opaque(Type):
    """Arbitrary JSON, preserved as is and never pruned (RawExtension, FieldsV1).

    On the wire upstream nests a message (``message``) whose field 1 holds the
    JSON bytes; the default is runtime.RawExtension. ``upstream_wire`` is False
    where an upstream struct is deliberately left undetailed here: the value is
    kept, but our protobuf encoding of it is not upstream's.
    """

    message: str = RAW_EXTENSION
    upstream_wire: bool = True
    kind = "opaque"

    def __repr__(self) -> str:
        return f"Opaque({self.message.rsplit('.', 1)[-1]})"


SCALAR_TYPES = (String, Integer, Number, Boolean, Bytes, Time, MicroTime, Duration, Quantity, IntOrString)


def is_scalar(t: Type) -> bool:
    """True for types server-side apply treats as one value (everything but
    maps, lists, structs and opaque JSON)."""
    return isinstance(t, SCALAR_TYPES)


# --- composites ----------------------------------------------------------------------------

MAP_TYPES = ("granular", "atomic")
LIST_TYPES = ("atomic", "set", "map")
PATCH_STRATEGIES = (None, "merge", "retainKeys", "merge,retainKeys", "replace")


@dataclasses.dataclass(frozen=True, repr=False)
class Map(Type):
    """A JSON object with string keys (Go ``map[string]V``)."""

    value_type: Type
    map_type: str = "granular"
    kind = "map"
    scalar = False

    def __post_init__(self) -> None:
        if self.map_type not in MAP_TYPES:
            raise ValueError(f"map_type must be one of {MAP_TYPES}")

    def __repr__(self) -> str:
        return f"Map({self.value_type!r})"


@dataclasses.dataclass(frozen=True, repr=False)
class List(Type):
    """A JSON array.

    ``list_type`` is the server-side-apply semantics. Left as None it is derived
    the way upstream derives it from an unmarked list: a ``merge`` patch
    strategy with a merge key reads as ``map`` keyed by that key, ``merge``
    without a key as ``set``, anything else as ``atomic``. ``marked`` records
    whether upstream declared ``+listType`` explicitly (OpenAPI emits
    ``x-kubernetes-list-type`` only then).

    ``wrapper`` names the proto message a list is wrapped in when it is a map
    value (``map<string, ExtraValue>`` with ``ExtraValue {repeated string
    items = 1}``).
    """

    item_type: Type
    list_type: str | None = None
    map_keys: tuple[str, ...] = ()
    patch_strategy: str | None = None
    patch_merge_key: str | None = None
    wrapper: str | None = None
    marked: bool = dataclasses.field(default=False, compare=False)
    kind = "list"
    scalar = False

    def __post_init__(self) -> None:
        if isinstance(self.map_keys, str):
            object.__setattr__(self, "map_keys", (self.map_keys,))
        elif not isinstance(self.map_keys, tuple):
            object.__setattr__(self, "map_keys", tuple(self.map_keys))
        if self.patch_strategy not in PATCH_STRATEGIES:
            raise ValueError(f"patch_strategy must be one of {PATCH_STRATEGIES}")
        if self.list_type is None:
            lt, keys = "atomic", self.map_keys
            if self.patch_strategy and "merge" in self.patch_strategy.split(","):
                if self.patch_merge_key:
                    lt, keys = "map", keys or (self.patch_merge_key,)
                else:
                    lt = "set"
            object.__setattr__(self, "list_type", lt)
            object.__setattr__(self, "map_keys", keys)
        else:
            object.__setattr__(self, "marked", True)
        if self.list_type not in LIST_TYPES:
            raise ValueError(f"list_type must be one of {LIST_TYPES}")
        if self.list_type == "map" and not self.map_keys:
            raise ValueError("a list of type map needs map_keys")
        if self.list_type != "map" and self.map_keys:
            raise ValueError("map_keys only go with list_type 'map'")

    @property
    def merges(self) -> bool:
        """Strategic merge patch merges this list (instead of replacing it)."""
        return self.patch_strategy is not None and "merge" in self.patch_strategy.split(",")

    def __repr__(self) -> str:
        extra = f", {self.list_type}" if self.list_type != "atomic" else ""
        return f"List({self.item_type!r}{extra})"


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class Field:
    """One field of a struct.

    ``json_name`` is empty for an inline (embedded) struct; ``number`` is the
    upstream protobuf field number; ``pointer`` is True when the upstream Go
    field is a pointer (emitted on the wire only when set); ``default`` is the
    OpenAPI default where upstream declares one; ``map_type`` overrides the
    struct's own atomicity for this one field (upstream's field-level
    ``+structType``); ``patch_strategy`` carries a strategic-merge strategy on
    a struct or map field (``retainKeys`` on a volume source union).
    """

    json_name: str
    type: Type
    number: int
    required: bool = False
    pointer: bool = False
    description: str = ""
    default: Any = None
    inline: bool = False
    map_type: str | None = None
    patch_strategy: str | None = None

    def __post_init__(self) -> None:
        if self.inline and not isinstance(self.type, Struct):
            raise ValueError(f"inline field #{self.number} must be a Struct")
        if not self.inline and not self.json_name:
            raise ValueError(f"field #{self.number} needs a JSON name")
        if not (0 < self.number < 1 << 29):
            raise ValueError(f"field {self.json_name}: bad proto number {self.number}")

    @property
    def inline_struct(self) -> Struct | None:
        """The embedded struct of an inline field; None for every other field."""
        return self.type if self.inline and isinstance(self.type, Struct) else None

    @property
    def atomic(self) -> bool:
        """True when server-side apply treats the value as one unit."""
        t = self.type
        if self.map_type is not None:
            return self.map_type == "atomic"
        if isinstance(t, (Struct, Map)):
            return t.map_type == "atomic"
        if isinstance(t, List):
            return t.list_type == "atomic"
        return True

    def __repr__(self) -> str:
        name = self.json_name or "<inline>"
        return f"Field({name}={self.number}, {self.type!r})"


class Struct(Type):
    """An object with named fields; ``name`` is the upstream proto message.

    ``fields`` is the declaration order (the wire view, inline structs as one
    field). JSON consumers use ``field``/``json_fields``, which flatten inline
    structs.
    """

    kind = "struct"
    scalar = False

    def __init__(self, name: str, fields: Iterable[Field], map_type: str = "granular", description: str = "") -> None:
        if map_type not in MAP_TYPES:
            raise ValueError(f"map_type must be one of {MAP_TYPES}")
        self.name = name
        self.fields: tuple[Field, ...] = tuple(fields)
        self.map_type = map_type
        self.description = description
        self._json: dict[str, Field] | None = None
        self._numbers: dict[int, Field] = {}
        for f in self.fields:
            if f.number in self._numbers:
                raise ValueError(f"{name}: field number {f.number} used twice")
            self._numbers[f.number] = f

    def __repr__(self) -> str:
        return f"Struct({self.short_name})"

    @property
    def short_name(self) -> str:
        return self.name.rsplit(".", 1)[-1]

    @property
    def package(self) -> str:
        return self.name.rsplit(".", 1)[0]

    @property
    def atomic(self) -> bool:
        return self.map_type == "atomic"

    @property
    def openapi_name(self) -> str:
        """Upstream's OpenAPI definition name (``io.k8s.api.core.v1.Pod``)."""
        return "io.k8s." + self.name[len("k8s.io.") :] if self.name.startswith("k8s.io.") else self.name

    def json_fields(self) -> dict[str, Field]:
        """JSON name -> field, inline structs flattened (their fields appear here)."""
        if self._json is None:
            out: dict[str, Field] = {}
            for f in self.fields:
                inline = f.inline_struct
                items = inline.json_fields().items() if inline is not None else ((f.json_name, f),)
                for name, inner in items:
                    if name in out:
                        raise ValueError(f"{self.name}: JSON field {name!r} declared twice")
                    out[name] = inner
            self._json = out
        return self._json

    def field(self, json_name: str) -> Field | None:
        return self.json_fields().get(json_name)

    def __contains__(self, json_name: str) -> bool:
        return json_name in self.json_fields()

    def by_number(self, number: int) -> Field | None:
        """The field with this proto number (inline structs are one field here)."""
        return self._numbers.get(number)

    @property
    def required(self) -> tuple[str, ...]:
        return tuple(n for n, f in self.json_fields().items() if f.required)

    def inline_path(self, json_name: str) -> tuple[Field, ...]:
        """The chain of fields from this struct to ``json_name`` on the wire:
        ``(volumeSource, emptyDir)`` for Volume's ``emptyDir``; ``()`` if absent."""
        for f in self.fields:
            if (inline := f.inline_struct) is not None:
                rest = inline.inline_path(json_name)
                if rest:
                    return (f, *rest)
            elif f.json_name == json_name:
                return (f,)
        return ()


# --- walking -------------------------------------------------------------------------------


def iter_structs(root: Type | Iterable[Type]) -> Iterator[Struct]:
    """Every distinct struct reachable from ``root`` (depth first, each once)."""
    stack = list(root) if not isinstance(root, Type) else [root]
    stack.reverse()
    seen: set[int] = set()
    while stack:
        t = stack.pop()
        if isinstance(t, List):
            stack.append(t.item_type)
        elif isinstance(t, Map):
            stack.append(t.value_type)
        elif isinstance(t, Struct):
            if id(t) in seen:
                continue
            seen.add(id(t))
            yield t
            stack.extend(f.type for f in reversed(t.fields))


def iter_fields(root: Struct, prefix: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Field, Struct]]:
    """Every field under ``root`` as ``(json path, field, owning struct)``.

    Paths are JSON names only, stepping through lists and maps without a
    marker, the way ``kubectl explain`` spells them (``spec.containers.ports``).
    Inline structs are flattened; a struct already on the current path is not
    entered again (no upstream kind here is recursive, but this stays safe).
    """

    def walk(s: Struct, path: tuple[str, ...], active: frozenset[int]):
        for name, f in s.json_fields().items():
            p = path + (name,)
            yield p, f, s
            inner = _element(f.type)
            if isinstance(inner, Struct) and id(inner) not in active:
                yield from walk(inner, p, active | {id(inner)})

    yield from walk(root, prefix, frozenset({id(root)}))


def _element(t: Type) -> Type:
    while isinstance(t, (List, Map)):
        t = t.item_type if isinstance(t, List) else t.value_type
    return t


PathStep = Union[str, int]


def split_path(path: str | Sequence[PathStep]) -> list[PathStep]:
    """``"spec.containers[0].ports"`` -> ``["spec", "containers", 0, "ports"]``."""
    if not isinstance(path, str):
        return list(path)
    out: list[PathStep] = []
    for part in path.split("."):
        if not part:
            continue
        while "[" in part and part.endswith("]"):
            head, _, rest = part.partition("[")
            if head:
                out.append(head)
            idx, _, part = rest.partition("]")
            out.append(int(idx) if idx.lstrip("-").isdigit() else idx)
            part = part or ""
            if not part:
                break
        if part:
            out.append(part)
    return out


def resolve_path(root: Type, path: str | Sequence[PathStep]) -> Type | None:
    """The type at ``path`` under ``root``, or None where the schema has no such field.

    Steps are JSON names; an int (or ``"[]"``/``"*"``) steps into a list item;
    any step on a map steps into its value; a name on a list steps into the item
    first (``spec.containers.ports`` as well as ``spec.containers[0].ports``).
    Opaque values swallow the rest of the path (anything may be inside).
    """
    t: Type | None = root
    for step in split_path(path):
        if t is None:
            return None
        if isinstance(t, Opaque):
            return t
        if isinstance(t, List):
            t = t.item_type
            if isinstance(step, int) or step in ("[]", "*"):
                continue
        if isinstance(t, Map):
            t = t.value_type
            continue
        if isinstance(t, Struct) and isinstance(step, str):
            f = t.field(step)
            t = f.type if f else None
        else:
            return None
    return t


def resolve_field(root: Struct, path: str | Sequence[PathStep]) -> Field | None:
    """The struct field the last named step of ``path`` refers to (None if the
    path ends inside a list, map or opaque value, or does not exist)."""
    steps = split_path(path)
    while steps and (not isinstance(steps[-1], str) or steps[-1] in ("[]", "*")):
        steps.pop()  # trailing list indexes: the field is the list's
    if not steps:
        return None
    parent = resolve_path(root, steps[:-1])
    if isinstance(parent, List):
        parent = parent.item_type
    last = steps[-1]
    return parent.field(last) if isinstance(parent, Struct) and isinstance(last, str) else None


# --- metadata types (k8s.io/apimachinery/pkg/apis/meta/v1) ----------------------------------

F = Field
STR = String()
BOOL = Boolean()
I32 = Integer(32)
I64 = Integer(64)
TIME = Time()
STR_LIST = List(STR)
STR_MAP = Map(STR)

TYPE_META = Struct(
    f"{META}.TypeMeta",
    [
        F("kind", STR, 1),
        F("apiVersion", STR, 2),
    ],
)

OWNER_REFERENCE = Struct(
    f"{META}.OwnerReference",
    [
        F("apiVersion", STR, 5, required=True),
        F("kind", STR, 1, required=True),
        F("name", STR, 3, required=True),
        F("uid", STR, 4, required=True),
        F("controller", BOOL, 6, pointer=True),
        F("blockOwnerDeletion", BOOL, 7, pointer=True),
    ],
    map_type="atomic",
)

MANAGED_FIELDS_ENTRY = Struct(
    f"{META}.ManagedFieldsEntry",
    [
        F("manager", STR, 1),
        F("operation", String(enum=("Apply", "Update")), 2),
        F("apiVersion", STR, 3),
        F("time", TIME, 4, pointer=True),
        F("fieldsType", STR, 6),
        F("fieldsV1", Opaque(FIELDS_V1), 7, pointer=True),
        F("subresource", STR, 8),
    ],
)

OBJECT_META = Struct(
    f"{META}.ObjectMeta",
    [
        F(
            "name",
            STR,
            1,
            description="Name unique within a namespace (or within the cluster for cluster-scoped "
            "kinds). Required when creating, unless generateName is used. Cannot be updated.",
        ),
        F(
            "generateName",
            STR,
            2,
            description="A prefix the server uses to generate a unique name "
            "when name is empty; a random suffix is appended.",
        ),
        F(
            "namespace",
            STR,
            3,
            description="The namespace the object lives in; empty means the "
            "default namespace for namespaced kinds. Cannot be updated.",
        ),
        F("selfLink", STR, 4, description="Deprecated and always empty."),
        F(
            "uid",
            STR,
            5,
            description="A value unique in time and space for this object, set by the server on create. Read-only.",
        ),
        F(
            "resourceVersion",
            STR,
            6,
            description="An opaque value identifying the stored version of the object, used "
            "for optimistic concurrency and for watches. Clients must not parse it.",
        ),
        F("generation", I64, 7, description="A sequence number for the desired state, set by the server. Read-only."),
        F("creationTimestamp", TIME, 8, description="When the server created the object (RFC 3339, UTC). Read-only."),
        F(
            "deletionTimestamp",
            TIME,
            9,
            pointer=True,
            description="When the object will be deleted, set by the server when deletion "
            "is requested and finalizers or a grace period hold it. Read-only.",
        ),
        F(
            "deletionGracePeriodSeconds",
            I64,
            10,
            pointer=True,
            description="Seconds the object is given to terminate gracefully before it is removed. Read-only.",
        ),
        F("labels", STR_MAP, 11, description="String keys and values used to organise and select objects."),
        F(
            "annotations",
            STR_MAP,
            12,
            description="String keys and values for arbitrary non-identifying data, kept by tools and controllers.",
        ),
        # v1.27 marks these two with patch markers only; unmarked merge lists read as
        # map (keyed by the merge key) and set respectively.
        F(
            "ownerReferences",
            List(OWNER_REFERENCE, patch_strategy="merge", patch_merge_key="uid"),
            13,
            description="Objects this object depends on; when all owners are gone the garbage collector deletes it.",
        ),
        F(
            "finalizers",
            List(STR, patch_strategy="merge"),
            14,
            description="Names that must each be removed before the object is deleted from storage.",
        ),
        F(
            "managedFields",
            List(MANAGED_FIELDS_ENTRY),
            17,
            description="Which manager owns which fields (server-side apply); maintained by the server.",
        ),
    ],
)

LIST_META = Struct(
    f"{META}.ListMeta",
    [
        F("selfLink", STR, 1),
        F("resourceVersion", STR, 2, description="The version of the list, for a following watch."),
        F(
            "continue",
            STR,
            3,
            description="Set when more items are available: pass it as the continue parameter to get the next page.",
        ),
        F("remainingItemCount", I64, 4, pointer=True, description="How many items follow this page, when known."),
    ],
)

LABEL_SELECTOR_REQUIREMENT = Struct(
    f"{META}.LabelSelectorRequirement",
    [
        F("key", STR, 1, required=True, description="The label key the requirement applies to."),
        F("operator", STR, 2, required=True, description="In, NotIn, Exists or DoesNotExist."),
        F("values", STR_LIST, 3, description="Values for In and NotIn; empty for Exists and DoesNotExist."),
    ],
)

LABEL_SELECTOR = Struct(
    f"{META}.LabelSelector",
    [
        F("matchLabels", STR_MAP, 1, description="Labels an object must carry, ANDed with matchExpressions."),
        F(
            "matchExpressions",
            List(LABEL_SELECTOR_REQUIREMENT),
            2,
            description="Requirements on labels, ANDed together.",
        ),
    ],
    map_type="atomic",
)

CONDITION = Struct(
    f"{META}.Condition",
    [
        F("type", STR, 1, required=True),
        F("status", String(enum=("True", "False", "Unknown")), 2, required=True),
        F("observedGeneration", I64, 3),
        F("lastTransitionTime", TIME, 4, required=True),
        F("reason", STR, 5, required=True),
        F("message", STR, 6, required=True),
    ],
)

STATUS_CAUSE = Struct(
    f"{META}.StatusCause",
    [
        F("reason", STR, 1),
        F("message", STR, 2),
        F("field", STR, 3),
    ],
)

STATUS_DETAILS = Struct(
    f"{META}.StatusDetails",
    [
        F("name", STR, 1),
        F("group", STR, 2),
        F("kind", STR, 3),
        F("uid", STR, 6),
        F("causes", List(STATUS_CAUSE), 4),
        F("retryAfterSeconds", I32, 5),
    ],
)

STATUS = Struct(
    f"{META}.Status",
    [
        F("metadata", LIST_META, 1),
        F("status", STR, 2),
        F("message", STR, 3),
        F("reason", STR, 4),
        F("details", STATUS_DETAILS, 5, pointer=True),
        F("code", I32, 6),
    ],
)

PRECONDITIONS = Struct(
    f"{META}.Preconditions",
    [
        F("uid", STR, 1, pointer=True),
        F("resourceVersion", STR, 2, pointer=True),
    ],
)

DELETE_OPTIONS = Struct(
    f"{META}.DeleteOptions",
    [
        F("gracePeriodSeconds", I64, 1, pointer=True),
        F("preconditions", PRECONDITIONS, 2, pointer=True),
        F("orphanDependents", BOOL, 3, pointer=True),
        F("propagationPolicy", STR, 4, pointer=True),
        F("dryRun", STR_LIST, 5),
    ],
)

# Objects carry apiVersion and kind in JSON (TypeMeta, inline without a proto
# number: on the wire they live in the envelope, not in the message).
TYPE_META_JSON_FIELDS = ("apiVersion", "kind")


# --- proto packages ---------------------------------------------------------------------------
# (the look-up of a kind's schema, ``schema_for``, is in ``apiserver_min.api.schemas``)


def proto_package(group: str, version: str) -> str:
    """The upstream proto package of a group version (``coordination.orch.io``, v1
    -> ``k8s.io.api.coordination.v1``; the core group -> ``k8s.io.api.core.v1``)."""
    if not group:
        return f"k8s.io.api.core.{version}"
    first = group.split(".", 1)[0]
    if first == "metrics":  # the resource metrics API lives outside k8s.io/api upstream
        return f"k8s.io.metrics.pkg.apis.metrics.{version}"
    if first == "apiextensions":  # so do custom resource definitions
        return f"k8s.io.apiextensions_apiserver.pkg.apis.apiextensions.{version}"
    return f"k8s.io.api.{first}.{version}"
