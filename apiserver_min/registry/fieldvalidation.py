"""Field validation of submitted objects, derived from the kind schemas.

Upstream decodes a request body into the kind's typed struct; what that decode
notices is what clients see, so this module reproduces its three outcomes from
the declarations in ``apiserver_min.api.schemas``:

* a value of the wrong JSON type (text in an integer field, a string where a
  list is declared, a malformed quantity or timestamp) is always fatal: 400
  naming the first such error with its field path, in upstream's words;
* fields absent from the schema ("unknown") and keys given twice in one object
  ("duplicate") are handled by ``fieldValidation``: Ignore drops them
  silently, Warn (the default) drops them and answers one ``Warning`` header
  entry per field, Strict answers 400 listing all of them. Unknown fields are
  always removed from what is stored: upstream's typed decode has nowhere to
  keep them. Opaque values (RawExtension, FieldsV1) keep anything;
* required fields (upstream's OpenAPI ``required``) that are omitted are a
  422 Invalid, like upstream's per-kind "Required value" errors. Not
  inside the root ``status``: it is written by controllers and agents, and
  upstream validates it per kind, never from the OpenAPI list (whose
  required markers there would reject what upstream accepts).

The walk is one pass over the decoded object with per-struct plans cached by
identity. Duplicate JSON keys are found without a second parse in the common
case: every key is followed by exactly one ``:`` outside strings, so when the
number of colons in the body equals the number of keys in the decoded object
plus the colons inside its strings, no key was folded by the JSON decoder;
only when the counts differ (or a ``\\u`` escape could hide a colon) is the
body parsed again, slowly, to name the duplicates.
"""

from __future__ import annotations

import binascii
import dataclasses
from typing import Any

from ..api import codec
from ..api import status as st
from ..api.duration import DurationError, parse_duration_ns
from ..api.quantity import QuantityError, parse_quantity
from ..api.schema import List, Map, String, Struct, Type
from ..api.timeutil import TimestampError, parse_rfc3339_ns
from ..api.validation import go_quote

__all__ = [
    "LEVELS",
    "FieldTypeError",
    "WalkReport",
    "walk",
    "validate_decoded",
    "validate_object",
    "duplicate_fields",
    "warning_header",
    "unknown_field",
    "duplicate_field",
    "go_type_name",
]

LEVELS = ("Ignore", "Warn", "Strict")

# TypeMeta is inline in every kind, without a schema field of its own.
_ROOT_EXTRA = frozenset(("apiVersion", "kind"))
# Root fields whose required markers are not enforced (see the module docstring).
_ROOT_UNCHECKED_REQUIRED = frozenset(("metadata", "status"))

_STR = String()
# Quantity strings already parsed successfully: the same few ("100m", "64Mi")
# arrive in nearly every pod, and parsing them is the walk's dearest step.
_GOOD_QUANTITIES: set[str] = set()
_GOOD_QUANTITIES_MAX = 4096
_QUANTITY_FORMAT = "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"


class FieldTypeError(ValueError):
    """A value of the wrong type: fatal whatever ``fieldValidation`` says."""


@dataclasses.dataclass
class WalkReport:
    """What one walk found besides type errors (which raise).

    ``problems`` are upstream's strict-decoding texts (``unknown field "x"``,
    ``duplicate field "y"``) in document order; ``missing`` the paths of
    required fields that are absent (an explicit null is upstream's zero value,
    which upstream's own clients send for empty non-omitempty fields); ``keys`` and ``string_colons``
    feed the duplicate-key check of JSON bodies.
    """

    problems: list[str] = dataclasses.field(default_factory=list)
    missing: list[str] = dataclasses.field(default_factory=list)
    keys: int = 0
    string_colons: int = 0


def unknown_field(path: str) -> str:
    """Upstream's strict-decoding text for a field the schema lacks: the path quoted
    as Go's ``strconv.Quote`` quotes it (quotes, backslashes and non-printable
    characters escaped), e.g. ``unknown field "spec.foo"``."""
    return "unknown field " + go_quote(path)


def duplicate_field(path: str) -> str:
    """Upstream's strict-decoding text for a key given twice: ``duplicate field "x"``."""
    return "duplicate field " + go_quote(path)


# --- Go type names (for upstream-shaped messages) --------------------------------------------

_SCALAR_GO = {
    "string": "string",
    "number": "float64",
    "boolean": "bool",
    "bytes": "[]uint8",
    "time": "v1.Time",
    "microtime": "v1.MicroTime",
    "duration": "v1.Duration",
    "quantity": "resource.Quantity",
    "int-or-string": "intstr.IntOrString",
    "opaque": "runtime.RawExtension",
}


def go_type_name(t: Type) -> str:
    """The Go type upstream's decoder names in a type error (``[]v1.Container``)."""
    if isinstance(t, Struct):
        return f"{t.package.rsplit('.', 1)[-1]}.{t.short_name}"
    if isinstance(t, List):
        return "[]" + go_type_name(t.item_type)
    if isinstance(t, Map):
        return "map[string]" + go_type_name(t.value_type)
    if t.kind == "integer":
        return f"int{t.bits}"  # type: ignore[attr-defined]
    return _SCALAR_GO.get(t.kind, t.kind)


def _json_kind(v: Any) -> str:
    """How Go's decoder names the JSON value it could not store."""
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    if isinstance(v, dict):
        return "object"
    return type(v).__name__


def _number_text(v: int | float) -> str:
    return repr(v) if isinstance(v, float) else str(v)


# --- per-struct plans ------------------------------------------------------------------------

_C_STRING, _C_STRUCT, _C_INT32, _C_BOOL, _C_OTHER = range(5)


def _code(t: Type) -> int:
    if t.kind == "string":
        return _C_STRING
    if isinstance(t, Struct):
        return _C_STRUCT
    if t.kind == "integer" and t.bits == 32:  # type: ignore[attr-defined]
        return _C_INT32
    if t.kind == "boolean":
        return _C_BOOL
    return _C_OTHER


class _Plan:
    """A struct's fields as ``name -> (dispatch code, type)``, computed once."""

    __slots__ = ("fields", "required", "go_name")

    def __init__(self, s: Struct) -> None:
        self.fields: dict[str, tuple[int, Type]] = {
            name: (_code(f.type), f.type) for name, f in s.json_fields().items()
        }
        self.required: tuple[str, ...] = s.required
        self.go_name = s.short_name


_PLANS: dict[int, _Plan] = {}


def _plan(s: Struct) -> _Plan:
    p = _PLANS.get(id(s))
    if p is None:
        p = _PLANS[id(s)] = _Plan(s)
    return p


def _count_all(v: Any, report: WalkReport) -> None:
    """Count keys and in-string colons of a subtree the walk does not enter."""
    stack = [v]
    while stack:
        x = stack.pop()
        if isinstance(x, dict):
            report.keys += len(x)
            for k, y in x.items():
                if isinstance(k, str) and ":" in k:
                    report.string_colons += k.count(":")
                stack.append(y)
        elif isinstance(x, list):
            stack.extend(x)
        elif isinstance(x, str) and ":" in x:
            report.string_colons += x.count(":")


# --- the walk --------------------------------------------------------------------------------


class _Walker:
    """One walk over one object. Paths are built only on the way down into
    composite values; scalar checks are inline in the struct loop."""

    __slots__ = ("report", "dups", "count", "required")

    def __init__(self, dups: dict[int, tuple[dict, list[str]]] | None, count: bool) -> None:
        self.report = WalkReport()
        self.dups = dups or None
        self.count = count
        self.required = True

    # Errors ----------------------------------------------------------------------------
    @staticmethod
    def _mismatch(v: Any, t: Type, owner: str, gopath: str) -> FieldTypeError:
        what = _json_kind(v)
        if what == "number" and t.kind in ("integer", "int-or-string"):
            what = "number " + _number_text(v)
        if owner:
            return FieldTypeError(
                f"json: cannot unmarshal {what} into Go struct field {owner}.{gopath} "
                f"of type {go_type_name(t) if t.kind != 'int-or-string' else 'int32'}"
            )
        return FieldTypeError(f"json: cannot unmarshal {what} into Go value of type {go_type_name(t)}")

    # Values ----------------------------------------------------------------------------
    def value(self, v: Any, t: Type, path: str, gopath: str, owner: str, container: Any, key: Any) -> None:
        """Check ``v`` (not None) against ``t``. ``container[key]`` is where it lives,
        for the one in-place fix (integral floats in integer fields)."""
        k = t.kind
        if k == "string":
            if type(v) is not str:
                raise self._mismatch(v, t, owner, gopath)
            if self.count and ":" in v:
                self.report.string_colons += v.count(":")
        elif k == "struct":
            if type(v) is not dict:
                raise self._mismatch(v, t, owner, gopath)
            self.struct(v, t, path, gopath)  # type: ignore[arg-type]
        elif k == "list":
            if type(v) is not list:
                raise self._mismatch(v, t, owner, gopath)
            item = t.item_type  # type: ignore[attr-defined]
            ik = item.kind
            if ik == "string":
                for x in v:
                    if type(x) is not str and x is not None:
                        raise self._mismatch(x, item, owner, gopath)
                    if self.count and x is not None and ":" in x:
                        self.report.string_colons += x.count(":")
            else:
                for i, x in enumerate(v):
                    if x is not None:
                        self.value(x, item, f"{path}[{i}]", gopath, owner, v, i)
        elif k == "map":
            if type(v) is not dict:
                raise self._mismatch(v, t, owner, gopath)
            vt = t.value_type  # type: ignore[attr-defined]
            count = self.count
            if count:
                self.report.keys += len(v)
            if vt.kind == "string":
                for mk, x in v.items():
                    if type(x) is not str and x is not None:
                        raise self._mismatch(x, vt, owner, gopath)
                    if count:
                        if ":" in mk:
                            self.report.string_colons += mk.count(":")
                        if x is not None and ":" in x:
                            self.report.string_colons += x.count(":")
            else:
                for mk, x in v.items():
                    if count and isinstance(mk, str) and ":" in mk:
                        self.report.string_colons += mk.count(":")
                    if x is not None:
                        self.value(x, vt, f"{path}.{mk}", gopath, owner, v, mk)
            if self.dups is not None:
                self._duplicates(v, path)
        elif k == "integer":
            if type(v) is not int:
                if type(v) is float and v.is_integer():
                    v = container[key] = int(v)  # YAML 1.0 / JSON 1.0: upstream's YAML path reads it as 1
                else:
                    raise self._mismatch(v, t, owner, gopath)
            if not t.minimum <= v <= t.maximum:  # type: ignore[attr-defined]
                raise self._mismatch(v, t, owner, gopath)
        elif k == "boolean":
            if type(v) is not bool:
                raise self._mismatch(v, t, owner, gopath)
        elif k == "number":
            if type(v) is not int and type(v) is not float:
                raise self._mismatch(v, t, owner, gopath)
        elif k == "opaque":
            if self.count:
                _count_all(v, self.report)
        else:
            self.special(v, t, path, gopath, owner)

    def special(self, v: Any, t: Type, path: str, gopath: str, owner: str) -> None:
        """Types with their own upstream decoders: quantity, time, duration, bytes, int-or-string."""
        k = t.kind
        if self.count and type(v) is str and ":" in v:
            self.report.string_colons += v.count(":")
        if k == "quantity":
            if type(v) is bool or not isinstance(v, (str, int, float)):
                raise self._mismatch(v, t, owner, gopath)
            if type(v) is str and v in _GOOD_QUANTITIES:
                return
            try:
                parse_quantity(v)
            except (QuantityError, ValueError):
                raise FieldTypeError(f"{path}: {_QUANTITY_FORMAT}") from None
            if type(v) is str:
                if len(_GOOD_QUANTITIES) >= _GOOD_QUANTITIES_MAX:
                    _GOOD_QUANTITIES.clear()
                _GOOD_QUANTITIES.add(v)
        elif k == "int-or-string":
            if type(v) is str:
                return
            if type(v) is float and v.is_integer():
                v = int(v)
            if type(v) is not int or not -(1 << 31) <= v < (1 << 31):
                raise self._mismatch(v, t, owner, gopath)
        elif k in ("time", "microtime"):
            if type(v) is not str:
                raise self._mismatch(v, t, owner, gopath)
            try:
                parse_rfc3339_ns(v)
            except TimestampError as exc:
                raise FieldTypeError(
                    f'{path}: parsing time "{v}" as "2006-01-02T15:04:05Z07:00": {exc.reason}'
                ) from None
        elif k == "duration":
            if type(v) is not str:
                raise self._mismatch(v, t, owner, gopath)
            try:
                parse_duration_ns(v)
            except DurationError as exc:
                raise FieldTypeError(f"{path}: {exc}") from None
        elif k == "bytes":
            if type(v) is not str:
                raise self._mismatch(v, t, owner, gopath)
            try:
                binascii.a2b_base64(v, strict_mode=True)
            except (binascii.Error, ValueError):
                raise FieldTypeError(f"{path}: illegal base64 data: {_base64_problem(v)}") from None
        else:  # a type this walk does not know: keep the value, as for opaque ones
            if self.count:
                _count_all(v, self.report)

    # Structs ---------------------------------------------------------------------------
    def struct(self, d: dict, s: Struct, path: str, gopath: str, root: bool = False) -> None:
        plan = _PLANS.get(id(s)) or _plan(s)
        fields = plan.fields
        owner = plan.go_name
        prefix = path + "." if path else ""
        goprefix = gopath + "." if gopath else ""
        report = self.report
        count = self.count
        if count:
            report.keys += len(d)
        unknown: list[Any] | None = None
        ft: Any  # the field's type: a Struct where its code is _C_STRUCT
        for name, v in d.items():
            entry = fields.get(name)
            if entry is None:
                if root and name in _ROOT_EXTRA:
                    if count and type(v) is str and ":" in v:
                        report.string_colons += v.count(":")
                    if v is not None and type(v) is not str:
                        raise self._mismatch(v, _STR, "TypeMeta", name)
                    continue
                if unknown is None:
                    unknown = []
                unknown.append(name)
                report.problems.append(unknown_field(f"{prefix}{name}"))
                if count:
                    if isinstance(name, str) and ":" in name:
                        report.string_colons += name.count(":")
                    _count_all(v, report)
                continue
            if v is None:
                continue
            code, ft = entry
            # The commonest cases inline; everything else through value().
            if code == _C_STRING:
                if type(v) is not str:
                    raise self._mismatch(v, ft, owner, goprefix + name)
                if count and ":" in v:
                    report.string_colons += v.count(":")
            elif code == _C_STRUCT:
                if type(v) is not dict:
                    raise self._mismatch(v, ft, owner, goprefix + name)
                if root and name == "status":  # no required markers enforced inside (module docstring)
                    self.required = False
                    self.struct(v, ft, name, name)
                    self.required = True
                else:
                    self.struct(v, ft, prefix + name, goprefix + name)
            elif code == _C_INT32:
                if type(v) is not int or not -2147483648 <= v <= 2147483647:
                    self.value(v, ft, prefix + name, goprefix + name, owner, d, name)
            elif code == _C_BOOL:
                if type(v) is not bool:
                    raise self._mismatch(v, ft, owner, goprefix + name)
            else:
                self.value(v, ft, prefix + name, goprefix + name, owner, d, name)
        if self.dups is not None:
            self._duplicates(d, path)
        if unknown:
            for name in unknown:
                del d[name]
        if plan.required and self.required:
            for name in plan.required:
                if name not in d and not (root and name in _ROOT_UNCHECKED_REQUIRED):
                    report.missing.append(prefix + name)

    def _duplicates(self, d: dict, path: str) -> None:
        entry = self.dups.get(id(d))  # type: ignore[union-attr]
        if entry is not None and entry[0] is d:
            prefix = path + "." if path else ""
            for name in entry[1]:
                self.report.problems.append(duplicate_field(f"{prefix}{name}"))


def _base64_problem(v: str) -> str:
    for i, ch in enumerate(v):
        if not (ch.isascii() and (ch.isalnum() or ch in "+/=")):
            return f"input byte {i}"
    return f"input byte {len(v)} (length or padding)"


def walk(
    obj: dict, schema: Struct, *, duplicates: dict[int, tuple[dict, list[str]]] | None = None, count: bool = False
) -> WalkReport:
    """Check ``obj`` against ``schema`` in place (unknown fields are removed).

    Raises :class:`FieldTypeError` on the first value of a wrong type. With
    ``count`` the report also carries the key and in-string colon counts used
    to detect duplicate JSON keys.
    """
    w = _Walker(duplicates, count)
    w.struct(obj, schema, "", "", root=True)
    return w.report


# --- request-level entry points --------------------------------------------------------------


def _type_error(kind: str, version: str, exc: FieldTypeError) -> st.ApiError:
    return st.bad_request(f'{kind} in version "{version}" cannot be handled as a {kind}: {exc}')


def _conclude(obj: dict, report: WalkReport, level: str, kind: str, version: str, group: str) -> list[str]:
    if report.problems and level == "Strict":
        raise st.bad_request(
            f'{kind} in version "{version}" cannot be handled as a {kind}: '
            f"strict decoding error: {', '.join(report.problems)}"
        )
    if report.missing:
        md = obj.get("metadata")
        name = (md.get("name") or md.get("generateName") or "") if isinstance(md, dict) else ""
        raise st.invalid(
            kind,
            name if isinstance(name, str) else "",
            [{"reason": "FieldValueRequired", "message": "Required value", "field": p} for p in report.missing],
            group,
        )
    return report.problems if level == "Warn" else []


def validate_object(
    obj: dict,
    schema: Struct,
    level: str,
    *,
    kind: str,
    version: str,
    group: str = "",
    duplicates: dict[int, tuple[dict, list[str]]] | None = None,
    extra_problems: list[str] | None = None,
) -> list[str]:
    """Validate an already decoded object (a patch result) in place.

    Returns the warnings to send (Warn only); raises 400 for a type error or,
    under Strict, for unknown/duplicate fields; 422 for missing required fields.
    ``extra_problems`` are strict-decoding problems found elsewhere (duplicate
    keys of a patch document), reported first.
    """
    try:
        report = walk(obj, schema, duplicates=duplicates)
    except FieldTypeError as exc:
        raise _type_error(kind, version, exc) from None
    if extra_problems:
        report.problems[:0] = extra_problems
    return _conclude(obj, report, level, kind, version, group)


def duplicate_fields(body: bytes, *, yaml: bool = False) -> list[str]:
    """``duplicate field "<path>"`` for every key repeated in a patch document
    (JSON, or YAML for apply: a YAML body that is a JSON object takes the JSON
    way), by path; for JSON empty at once when the cheap count shows none. A malformed body gives none: the caller's own decode
    reports it."""
    if yaml and body.lstrip()[:1] != b"{":
        try:
            tracked = codec.decode_object_body(body, "application/yaml")
        except st.ApiError:
            return []
        return _duplicate_paths(tracked) if tracked.duplicates else []
    try:
        fast = codec.decode_object_body(body, "application/json")
    except st.ApiError:
        return []
    return decoded_duplicates(fast)[1]


def decoded_duplicates(decoded: "codec.DecodedBody") -> tuple[Any, list[str]]:
    """``duplicate field "<path>"`` for every key repeated in a decoded body, for kinds
    without a declared schema (custom resources), and the object to use: the body
    decoded again when its keys had to be tracked (the values are the same, the last
    of a repeated key's). JSON is re-parsed only when the cheap count of keys and
    colons shows a key folded; YAML's decoder has tracked them already."""
    if decoded.media != "json":
        return decoded.obj, _duplicate_paths(decoded) if decoded.duplicates else []
    report = WalkReport()
    _count_all(decoded.obj, report)
    if not decoded.maybe_escaped and report.keys + report.string_colons == decoded.colons:
        return decoded.obj, []
    again = codec.decode_json_tracking_duplicates(decoded.body)
    return (again.obj, _duplicate_paths(again)) if again.duplicates else (decoded.obj, [])


def _duplicate_paths(slow: "codec.DecodedBody") -> list[str]:
    out: list[str] = []
    stack: list[tuple[Any, str]] = [(slow.obj, "")]
    dups = slow.duplicates or {}
    while stack:
        x, path = stack.pop()
        if isinstance(x, dict):
            prefix = path + "." if path else ""
            entry = dups.get(id(x))
            if entry is not None and entry[0] is x:
                out.extend(duplicate_field(f"{prefix}{k}") for k in entry[1])
            stack.extend((v, prefix + str(k)) for k, v in reversed(list(x.items())))
        elif isinstance(x, list):
            stack.extend((v, f"{path}[{i}]") for i, v in reversed(list(enumerate(x))))
    return out


def validate_decoded(
    decoded: "codec.DecodedBody", schema: Struct, level: str, *, kind: str, version: str, group: str = ""
) -> tuple[dict, list[str]]:
    """Validate a decoded request body; returns the object to use (possibly a
    re-parse of the body, when duplicate JSON keys had to be named) and the
    warnings to send."""
    obj = decoded.obj
    check_dups = level != "Ignore" and decoded.media == "json"
    try:
        report = walk(obj, schema, duplicates=decoded.duplicates, count=check_dups)
        if check_dups and (decoded.maybe_escaped or report.keys + report.string_colons != decoded.colons):
            again = codec.decode_json_tracking_duplicates(decoded.body)
            if again.duplicates:
                obj = again.obj
                report = walk(obj, schema, duplicates=again.duplicates)
    except FieldTypeError as exc:
        raise _type_error(kind, version, exc) from None
    return obj, _conclude(obj, report, level, kind, version, group)


def warning_header(text: str) -> str:
    """One ``Warning`` header value in upstream's form: ``299 - "<text>"``, with
    quotes and backslashes in the text escaped."""
    return '299 - "' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
