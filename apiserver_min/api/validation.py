"""Name, label and annotation rules, worded the way upstream words them.

Clients (kubectl, client libraries, people reading a 422) recognise the
upstream validation text; an API that accepted or rejected different names, or
explained a rejection differently, would be a different API. So the rules and
the messages follow apimachinery (``util/validation``, ``api/validation`` and
``apis/meta/v1/validation`` as of v1.27) while the code is our own. Lengths are
counted in UTF-8 bytes because upstream counts Go string bytes.

``FieldError`` mirrors upstream's ``field.Error``: the reason strings are the
ones that end up in ``Status.details.causes[].reason``, and ``message()`` is
the text that ends up in ``causes[].message`` and in the Status message.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

__all__ = [
    "FIELD_VALUE_INVALID",
    "FIELD_VALUE_REQUIRED",
    "FIELD_VALUE_NOT_SUPPORTED",
    "FIELD_VALUE_DUPLICATE",
    "FIELD_VALUE_FORBIDDEN",
    "FIELD_VALUE_TOO_LONG",
    "FIELD_VALUE_TYPE_INVALID",
    "FIELD_VALUE_NOT_FOUND",
    "FIELD_VALUE_TOO_MANY",
    "INTERNAL_ERROR",
    "DNS1123_LABEL_MAX_LENGTH",
    "DNS1123_SUBDOMAIN_MAX_LENGTH",
    "DNS1035_LABEL_MAX_LENGTH",
    "QUALIFIED_NAME_MAX_LENGTH",
    "LABEL_VALUE_MAX_LENGTH",
    "TOTAL_ANNOTATION_SIZE_LIMIT_B",
    "FieldError",
    "GoValue",
    "go_quote",
    "max_len_error",
    "regex_error",
    "empty_error",
    "is_dns1123_subdomain",
    "is_dns1123_label",
    "is_wildcard_dns1123_subdomain",
    "validate_domain_prefixed_path",
    "is_dns1035_label",
    "is_qualified_name",
    "is_valid_label_value",
    "is_valid_annotation_key",
    "is_valid_path_segment_name",
    "name_rule",
    "validate_label_key",
    "validate_labels",
    "validate_annotations",
    "validate_object_name",
    "validate_generate_name",
]

# Reasons, as upstream's field.ErrorType values.
FIELD_VALUE_INVALID = "FieldValueInvalid"
FIELD_VALUE_REQUIRED = "FieldValueRequired"
FIELD_VALUE_NOT_SUPPORTED = "FieldValueNotSupported"
FIELD_VALUE_DUPLICATE = "FieldValueDuplicate"
FIELD_VALUE_FORBIDDEN = "FieldValueForbidden"
FIELD_VALUE_TOO_LONG = "FieldValueTooLong"
FIELD_VALUE_TYPE_INVALID = "FieldValueTypeInvalid"
FIELD_VALUE_NOT_FOUND = "FieldValueNotFound"
FIELD_VALUE_TOO_MANY = "FieldValueTooMany"
INTERNAL_ERROR = "InternalError"

_TYPE_TEXT = {
    FIELD_VALUE_NOT_FOUND: "Not found",
    FIELD_VALUE_REQUIRED: "Required value",
    FIELD_VALUE_DUPLICATE: "Duplicate value",
    FIELD_VALUE_INVALID: "Invalid value",
    FIELD_VALUE_NOT_SUPPORTED: "Unsupported value",
    FIELD_VALUE_FORBIDDEN: "Forbidden",
    FIELD_VALUE_TOO_LONG: "Too long",
    FIELD_VALUE_TOO_MANY: "Too many",
    INTERNAL_ERROR: "Internal error",
    FIELD_VALUE_TYPE_INVALID: "Invalid value",
}

# Upstream prints no value for these: the value is either meaningless
# (Required, Forbidden) or too large to echo back (TooLong).
_VALUELESS_TYPES = frozenset({FIELD_VALUE_REQUIRED, FIELD_VALUE_FORBIDDEN, FIELD_VALUE_TOO_LONG, INTERNAL_ERROR})

_GO_ESCAPES = {
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\v": "\\v",
    "\\": "\\\\",
    '"': '\\"',
}


def go_quote(s: str) -> str:
    """Quote ``s`` the way Go's ``%q`` / ``strconv.Quote`` does."""
    out = ['"']
    for ch in s:
        esc = _GO_ESCAPES.get(ch)
        if esc is not None:
            out.append(esc)
        elif ch.isprintable():
            out.append(ch)
        else:
            cp = ord(ch)
            if cp < 0x80:
                out.append(f"\\x{cp:02x}")
            elif cp < 0x10000:
                out.append(f"\\u{cp:04x}")
            else:
                out.append(f"\\U{cp:08x}")
    out.append('"')
    return "".join(out)


class GoValue(str):
    """A bad value upstream reports as a Go struct or slice (``%#v``, e.g.
    ``apps.DeploymentStrategy{Type:"X", ...}``), already rendered that way: shown as
    is, not quoted like a string value."""


def _format_value(value: Any) -> str:
    # Mirrors field.Error.ErrorBody: strings quoted, scalars bare, nil as null.
    if value is None:
        return "null"
    if isinstance(value, GoValue):
        return str(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return go_quote(value)
    if isinstance(value, (int, float)):
        return str(value)
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    except (TypeError, ValueError):
        return repr(value)


@dataclass(frozen=True)
class FieldError:
    """One field-level validation failure (upstream ``field.Error``)."""

    type: str
    field: str
    value: Any = ""
    detail: str = ""

    def body(self) -> str:
        """The message without the field path (upstream ``ErrorBody``)."""
        text = _TYPE_TEXT.get(self.type, self.type)
        if self.type not in _VALUELESS_TYPES:
            text = f"{text}: {_format_value(self.value)}"
        if self.detail:
            text = f"{text}: {self.detail}"
        return text

    def message(self) -> str:
        return f"{self.field}: {self.body()}"

    def __str__(self) -> str:
        return self.message()

    # Constructors named after upstream's field.Invalid, field.Required, ...

    @classmethod
    def invalid(cls, field: str, value: Any, detail: str) -> "FieldError":
        return cls(FIELD_VALUE_INVALID, field, value, detail)

    @classmethod
    def required(cls, field: str, detail: str = "") -> "FieldError":
        return cls(FIELD_VALUE_REQUIRED, field, "", detail)

    @classmethod
    def forbidden(cls, field: str, detail: str) -> "FieldError":
        return cls(FIELD_VALUE_FORBIDDEN, field, "", detail)

    @classmethod
    def duplicate(cls, field: str, value: Any) -> "FieldError":
        return cls(FIELD_VALUE_DUPLICATE, field, value, "")

    @classmethod
    def not_supported(cls, field: str, value: Any, valid_values: Iterable[str] = ()) -> "FieldError":
        quoted = [go_quote(v) for v in valid_values]
        detail = "supported values: " + ", ".join(quoted) if quoted else ""
        return cls(FIELD_VALUE_NOT_SUPPORTED, field, value, detail)

    @classmethod
    def too_long(cls, field: str, value: Any, max_length: int) -> "FieldError":
        return cls(FIELD_VALUE_TOO_LONG, field, value, f"must have at most {max_length} bytes")

    @classmethod
    def type_invalid(cls, field: str, value: Any, detail: str) -> "FieldError":
        return cls(FIELD_VALUE_TYPE_INVALID, field, value, detail)


# --- message helpers (upstream MaxLenError, RegexError, EmptyError) ---------


def max_len_error(length: int) -> str:
    return f"must be no more than {length} characters"


def regex_error(msg: str, fmt: str, *examples: str) -> str:
    if not examples:
        return f"{msg} (regex used for validation is '{fmt}')"
    shown = " or ".join(f"'{e}', " for e in examples)
    return f"{msg} (e.g. {shown}regex used for validation is '{fmt}')"


def empty_error() -> str:
    return "must be non-empty"


def _byte_len(s: str) -> int:
    return len(s.encode("utf-8", "surrogatepass"))


# --- formats -----------------------------------------------------------------

_QNAME_CHAR_FMT = "[A-Za-z0-9]"
_QNAME_EXT_CHAR_FMT = "[-A-Za-z0-9_.]"
_QUALIFIED_NAME_FMT = f"({_QNAME_CHAR_FMT}{_QNAME_EXT_CHAR_FMT}*)?{_QNAME_CHAR_FMT}"
_QUALIFIED_NAME_ERR_MSG = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
)
QUALIFIED_NAME_MAX_LENGTH = 63
_QUALIFIED_NAME_RE = re.compile(_QUALIFIED_NAME_FMT)

_LABEL_VALUE_FMT = f"({_QUALIFIED_NAME_FMT})?"
_LABEL_VALUE_ERR_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, "
    "'-', '_' or '.', and must start and end with an alphanumeric character"
)
LABEL_VALUE_MAX_LENGTH = 63
_LABEL_VALUE_RE = re.compile(_LABEL_VALUE_FMT)

_DNS1123_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_LABEL_ERR_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character"
)
DNS1123_LABEL_MAX_LENGTH = 63
_DNS1123_LABEL_RE = re.compile(_DNS1123_LABEL_FMT)

_DNS1123_SUBDOMAIN_FMT = f"{_DNS1123_LABEL_FMT}(\\.{_DNS1123_LABEL_FMT})*"
_DNS1123_SUBDOMAIN_ERR_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
    "'-' or '.', and must start and end with an alphanumeric character"
)
DNS1123_SUBDOMAIN_MAX_LENGTH = 253
_DNS1123_SUBDOMAIN_RE = re.compile(_DNS1123_SUBDOMAIN_FMT)

_DNS1035_LABEL_FMT = "[a-z]([-a-z0-9]*[a-z0-9])?"
_DNS1035_LABEL_ERR_MSG = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', "
    "start with an alphabetic character, and end with an alphanumeric character"
)
DNS1035_LABEL_MAX_LENGTH = 63
_DNS1035_LABEL_RE = re.compile(_DNS1035_LABEL_FMT)

TOTAL_ANNOTATION_SIZE_LIMIT_B = 256 * (1 << 10)


# --- string checks: a list of problems, empty when valid -----------------------


def is_dns1123_subdomain(value: str) -> list[str]:
    errs: list[str] = []
    if _byte_len(value) > DNS1123_SUBDOMAIN_MAX_LENGTH:
        errs.append(max_len_error(DNS1123_SUBDOMAIN_MAX_LENGTH))
    if not _DNS1123_SUBDOMAIN_RE.fullmatch(value):
        errs.append(regex_error(_DNS1123_SUBDOMAIN_ERR_MSG, _DNS1123_SUBDOMAIN_FMT, "example.com"))
    return errs


_WILDCARD_DNS1123_SUBDOMAIN_FMT = "\\*\\." + _DNS1123_SUBDOMAIN_FMT
_WILDCARD_DNS1123_SUBDOMAIN_ERR_MSG = (
    "a wildcard DNS-1123 subdomain must start with '*.', followed by a valid DNS subdomain, "
    "which must consist of lower case alphanumeric characters, '-' or '.' and end with an alphanumeric character"
)
_WILDCARD_DNS1123_SUBDOMAIN_RE = re.compile(_WILDCARD_DNS1123_SUBDOMAIN_FMT)


def is_wildcard_dns1123_subdomain(value: str) -> list[str]:
    """``*.`` followed by a DNS-1123 subdomain (upstream IsWildcardDNS1123Subdomain)."""
    errs: list[str] = []
    if _byte_len(value) > DNS1123_SUBDOMAIN_MAX_LENGTH:
        errs.append(max_len_error(DNS1123_SUBDOMAIN_MAX_LENGTH))
    if not _WILDCARD_DNS1123_SUBDOMAIN_RE.fullmatch(value):
        errs.append(regex_error(_WILDCARD_DNS1123_SUBDOMAIN_ERR_MSG, _WILDCARD_DNS1123_SUBDOMAIN_FMT, "*.example.com"))
    return errs


_HTTP_PATH_FMT = "[A-Za-z0-9/\\-._~%!$&'()*+,;=:]+"
_HTTP_PATH_RE = re.compile(_HTTP_PATH_FMT)


def validate_domain_prefixed_path(path: str, value: str) -> list[FieldError]:
    """A path prefixed by a DNS subdomain, as ``example.com/controller``
    (upstream IsDomainPrefixedPath)."""
    if not value:
        return [FieldError.required(path)]
    host, sep, rest = value.partition("/")
    if not sep or not host or not rest:
        return [FieldError.invalid(path, value, 'must be a domain-prefixed path (such as "acme.io/foo")')]
    errs = [FieldError.invalid(path, host, msg) for msg in is_dns1123_subdomain(host)]
    if not _HTTP_PATH_RE.fullmatch(rest):
        errs.append(FieldError.invalid(path, rest, regex_error("Invalid path", _HTTP_PATH_FMT)))
    return errs


def is_dns1123_label(value: str) -> list[str]:
    errs: list[str] = []
    if _byte_len(value) > DNS1123_LABEL_MAX_LENGTH:
        errs.append(max_len_error(DNS1123_LABEL_MAX_LENGTH))
    if not _DNS1123_LABEL_RE.fullmatch(value):
        errs.append(regex_error(_DNS1123_LABEL_ERR_MSG, _DNS1123_LABEL_FMT, "my-name", "123-abc"))
    return errs


def is_dns1035_label(value: str) -> list[str]:
    errs: list[str] = []
    if _byte_len(value) > DNS1035_LABEL_MAX_LENGTH:
        errs.append(max_len_error(DNS1035_LABEL_MAX_LENGTH))
    if not _DNS1035_LABEL_RE.fullmatch(value):
        errs.append(regex_error(_DNS1035_LABEL_ERR_MSG, _DNS1035_LABEL_FMT, "my-name", "abc-123"))
    return errs


def is_qualified_name(value: str) -> list[str]:
    """Label keys, annotation keys, finalizers: ``[prefix/]name``."""
    errs: list[str] = []
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errs.append("prefix part " + empty_error())
        else:
            errs.extend("prefix part " + m for m in is_dns1123_subdomain(prefix))
    else:
        return [
            "a qualified name "
            + regex_error(_QUALIFIED_NAME_ERR_MSG, _QUALIFIED_NAME_FMT, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if not name:
        errs.append("name part " + empty_error())
    elif _byte_len(name) > QUALIFIED_NAME_MAX_LENGTH:
        errs.append("name part " + max_len_error(QUALIFIED_NAME_MAX_LENGTH))
    if not _QUALIFIED_NAME_RE.fullmatch(name):
        errs.append(
            "name part " + regex_error(_QUALIFIED_NAME_ERR_MSG, _QUALIFIED_NAME_FMT, "MyName", "my.name", "123-abc")
        )
    return errs


def is_valid_label_value(value: str) -> list[str]:
    errs: list[str] = []
    if _byte_len(value) > LABEL_VALUE_MAX_LENGTH:
        errs.append(max_len_error(LABEL_VALUE_MAX_LENGTH))
    if not _LABEL_VALUE_RE.fullmatch(value):
        errs.append(regex_error(_LABEL_VALUE_ERR_MSG, _LABEL_VALUE_FMT, "MyValue", "my_value", "12345"))
    return errs


def is_valid_annotation_key(key: str) -> list[str]:
    # Upstream checks the lower-cased key: annotation prefixes may use
    # upper case ("Example.com/x") where label prefixes may not.
    return is_qualified_name(key.lower())


def is_valid_path_segment_name(name: str) -> list[str]:
    """Names that only have to survive being one URL path segment (RBAC kinds)."""
    errs: list[str] = []
    for bad in (".", ".."):
        if name == bad:
            errs.append(f"may not be '{bad}'")
    for bad in ("/", "%"):
        if bad in name:
            errs.append(f"may not contain '{bad}'")
    return errs


# --- object names ----------------------------------------------------------------

NameRule = Callable[[str, bool], list[str]]


def _mask_trailing_dash(name: str) -> str:
    # A generateName prefix gets random characters appended, so a trailing
    # '-' is fine there; upstream swaps the last *two* characters for "a".
    if len(name) > 1 and name.endswith("-"):
        return name[:-2] + "a"
    return name


def _masked(check: Callable[[str], list[str]]) -> NameRule:
    def rule(name: str, prefix: bool) -> list[str]:
        return check(_mask_trailing_dash(name) if prefix else name)

    return rule


def _path_segment_rule(name: str, prefix: bool) -> list[str]:
    if prefix:
        # Only the "may not contain" half applies to a prefix.
        return [m for m in is_valid_path_segment_name(name) if m.startswith("may not contain")]
    return is_valid_path_segment_name(name)


_NAME_RULES: dict[str, NameRule] = {
    "subdomain": _masked(is_dns1123_subdomain),
    "label": _masked(is_dns1123_label),
    "dns1035": _masked(is_dns1035_label),
    "path_segment": _path_segment_rule,
}


def name_rule(kind_rule: str | NameRule) -> NameRule:
    """Resolve a rule name ("subdomain", "label", "dns1035", "path_segment")."""
    if callable(kind_rule):
        return kind_rule
    try:
        return _NAME_RULES[kind_rule]
    except KeyError:
        raise ValueError(f"unknown name rule {kind_rule!r}; expected one of {sorted(_NAME_RULES)}") from None


def validate_object_name(
    name: str | None, path: str = "metadata.name", kind_rule: str | NameRule = "subdomain"
) -> list[FieldError]:
    rule = name_rule(kind_rule)
    if not name:
        return [FieldError.required(path, "name or generateName is required")]
    if not isinstance(name, str):
        return [FieldError.type_invalid(path, name, "must be a string")]
    return [FieldError.invalid(path, name, msg) for msg in rule(name, False)]


def validate_generate_name(
    generate_name: str | None,
    path: str = "metadata.generateName",
    kind_rule: str | NameRule = "subdomain",
) -> list[FieldError]:
    rule = name_rule(kind_rule)
    if not generate_name:
        return []
    if not isinstance(generate_name, str):
        return [FieldError.type_invalid(path, generate_name, "must be a string")]
    return [FieldError.invalid(path, generate_name, msg) for msg in rule(generate_name, True)]


# --- labels and annotations ------------------------------------------------------


def validate_label_key(key: str, path: str) -> list[FieldError]:
    return [FieldError.invalid(path, key, msg) for msg in is_qualified_name(key)]


def validate_labels(labels: Mapping[str, str] | None, path: str = "metadata.labels") -> list[FieldError]:
    if labels is None:
        return []
    if not isinstance(labels, Mapping):
        return [FieldError.type_invalid(path, labels, "must be an object")]
    errs: list[FieldError] = []
    for key, value in labels.items():
        if not isinstance(key, str):
            errs.append(FieldError.type_invalid(path, key, "must be a string"))
            continue
        errs.extend(validate_label_key(key, path))
        if not isinstance(value, str):
            errs.append(FieldError.type_invalid(f"{path}[{key}]", value, "must be a string"))
            continue
        errs.extend(FieldError.invalid(path, value, msg) for msg in is_valid_label_value(value))
    return errs


def validate_annotations(annotations: Mapping[str, str] | None, path: str = "metadata.annotations") -> list[FieldError]:
    if annotations is None:
        return []
    if not isinstance(annotations, Mapping):
        return [FieldError.type_invalid(path, annotations, "must be an object")]
    errs: list[FieldError] = []
    total = 0
    for key, value in annotations.items():
        if not isinstance(key, str):
            errs.append(FieldError.type_invalid(path, key, "must be a string"))
            continue
        errs.extend(FieldError.invalid(path, key, msg) for msg in is_valid_annotation_key(key))
        if not isinstance(value, str):
            errs.append(FieldError.type_invalid(f"{path}[{key}]", value, "must be a string"))
            continue
        total += _byte_len(key) + _byte_len(value)
    if total > TOTAL_ANNOTATION_SIZE_LIMIT_B:
        errs.append(FieldError.too_long(path, "", TOTAL_ANNOTATION_SIZE_LIMIT_B))
    return errs


def _cause(err: FieldError) -> dict:
    return {"reason": err.type, "message": err.body(), "field": err.field}


def causes(errors: list[FieldError]) -> list[dict]:
    return [_cause(e) for e in errors]


def go_list(values: Iterable[str]) -> str:
    """A string list as upstream's errors print it: ["a" "b"]."""
    return "[" + " ".join(f'"{v}"' for v in values) + "]"
