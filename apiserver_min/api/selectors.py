"""Label and field selectors with upstream's grammar, semantics and spelling.

Selectors arrive from kubectl and client libraries as query strings and inside
objects (``spec.selector``), and their canonical string form goes back out
(a Scale's ``status.selector``); both directions have to agree with
apimachinery's ``labels`` and ``fields`` packages or clients see different
objects than they asked for. The parsers therefore keep upstream's quirks on
purpose: ``notin``/``!=`` match objects without the key, ``x in ()`` means the
empty value, field selector terms compare against "" for absent fields.

Errors carry the offending token and its character offset so a 400 can point
at the mistake; the text up to the position note is upstream's wording.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Iterator, Mapping, NamedTuple

from apiserver_min.api.validation import (
    FieldError,
    go_quote,
    is_qualified_name,
    is_valid_label_value,
    validate_labels,
)

__all__ = [
    "SelectorError",
    "IN",
    "NOT_IN",
    "EQUALS",
    "DOUBLE_EQUALS",
    "NOT_EQUALS",
    "EXISTS",
    "DOES_NOT_EXIST",
    "GREATER_THAN",
    "LESS_THAN",
    "Requirement",
    "new_requirement",
    "LabelSelector",
    "parse_label_selector",
    "label_selector_from_dict",
    "validate_label_selector",
    "FieldRequirement",
    "FieldSelector",
    "parse_field_selector",
    "escape_field_value",
    "unescape_field_value",
]


class SelectorError(ValueError):
    """A selector that does not parse or does not validate."""

    def __init__(self, message: str, token: str | None = None, position: int | None = None):
        self.detail = message
        self.token = token
        self.position = position
        text = message if position is None else f"{message} (at position {position})"
        super().__init__(text)


# Operators, spelled as upstream's selection.Operator values.
IN = "in"
NOT_IN = "notin"
EQUALS = "="
DOUBLE_EQUALS = "=="
NOT_EQUALS = "!="
EXISTS = "exists"
DOES_NOT_EXIST = "!"
GREATER_THAN = "gt"
LESS_THAN = "lt"

# Listed in upstream's order: it appears in "expected: ..." messages.
_BINARY_OPERATORS = (IN, NOT_IN, EQUALS, DOUBLE_EQUALS, NOT_EQUALS, GREATER_THAN, LESS_THAN)
_UNARY_OPERATORS = (EXISTS, DOES_NOT_EXIST)
_ALL_OPERATORS = _BINARY_OPERATORS + _UNARY_OPERATORS

_INT64_RE = re.compile(r"[+-]?[0-9]+")
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


def _parse_int64(s: str) -> int | None:
    # Go's strconv.ParseInt(s, 10, 64): no spaces, no underscores, in range.
    if not _INT64_RE.fullmatch(s):
        return None
    n = int(s)
    return n if _INT64_MIN <= n <= _INT64_MAX else None


# --- label selector model ---------------------------------------------------------


class Requirement(NamedTuple):
    """One ANDed clause: ``(key, operator, values)``; values sorted and unique."""

    key: str
    operator: str
    values: tuple[str, ...]

    def matches(self, labels: Mapping[str, str]) -> bool:
        op = self.operator
        present = self.key in labels
        if op in (IN, EQUALS, DOUBLE_EQUALS):
            return present and labels[self.key] in self.values
        if op in (NOT_IN, NOT_EQUALS):
            return not present or labels[self.key] not in self.values
        if op == EXISTS:
            return present
        if op == DOES_NOT_EXIST:
            return not present
        if op in (GREATER_THAN, LESS_THAN):
            if not present or len(self.values) != 1:
                return False
            have = _parse_int64(labels[self.key])
            want = _parse_int64(self.values[0])
            if have is None or want is None:
                return False
            return have > want if op == GREATER_THAN else have < want
        return False

    def __str__(self) -> str:
        op = self.operator
        if op == EXISTS:
            return self.key
        if op == DOES_NOT_EXIST:
            return "!" + self.key
        joined = ",".join(self.values)
        if op in (IN, NOT_IN):
            return f"{self.key} {op} ({joined})"
        symbol = {GREATER_THAN: ">", LESS_THAN: "<"}.get(op, op)
        return f"{self.key}{symbol}{joined}"


def _requirement_problems(key: str, op: str, values: tuple[str, ...]) -> list[str]:
    # Upstream NewRequirement's checks, as plain messages.
    problems: list[str] = []
    key_errs = is_qualified_name(key)
    if key_errs:
        problems.append(f"invalid label key {go_quote(key)}: {'; '.join(key_errs)}")
    if op in (IN, NOT_IN):
        if not values:
            problems.append("for 'in', 'notin' operators, values set can't be empty")
    elif op in (EQUALS, DOUBLE_EQUALS, NOT_EQUALS):
        if len(values) != 1:
            problems.append("exact-match compatibility requires one single value")
    elif op in (EXISTS, DOES_NOT_EXIST):
        if values:
            problems.append("values set must be empty for exists and does not exist")
    elif op in (GREATER_THAN, LESS_THAN):
        if len(values) != 1:
            problems.append("for 'Gt', 'Lt' operators, exactly one value is required")
        for v in values:
            if _parse_int64(v) is None:
                problems.append(f"for 'Gt', 'Lt' operators, the value must be an integer: {go_quote(v)}")
    else:
        supported = ", ".join(go_quote(o) for o in _ALL_OPERATORS)
        problems.append(f"unsupported operator {go_quote(op)}: supported values: {supported}")
    for v in values:
        val_errs = is_valid_label_value(v)
        if val_errs:
            problems.append(f"invalid label value {go_quote(v)} for key {go_quote(key)}: {'; '.join(val_errs)}")
    return problems


def new_requirement(key: str, operator: str, values: Iterable[str] = ()) -> Requirement:
    """A validated requirement for building selectors in code (upstream ``NewRequirement``)."""
    normalized = tuple(sorted(set(values)))
    problems = _requirement_problems(key, operator, normalized)
    if problems:
        raise SelectorError("; ".join(problems), token=key)
    return Requirement(key, operator, normalized)


def _sort_key(r: Requirement) -> tuple[str, str]:
    return (r.key, str(r))


class LabelSelector:
    """An AND of requirements; no requirements selects everything."""

    __slots__ = ("_reqs", "_nothing")

    def __init__(self, requirements: Iterable[Requirement] = (), *, _nothing: bool = False):
        self._reqs: tuple[Requirement, ...] = tuple(sorted(requirements, key=_sort_key))
        self._nothing = _nothing

    @classmethod
    def everything(cls) -> "LabelSelector":
        return cls()

    @classmethod
    def nothing(cls) -> "LabelSelector":
        """What a missing (null) structured selector means upstream: match no object."""
        return cls(_nothing=True)

    @classmethod
    def from_set(cls, labels: Mapping[str, str] | None) -> "LabelSelector":
        """``k=v`` for every pair (a Service's or ReplicationController's selector)."""
        return cls(new_requirement(k, EQUALS, (v,)) for k, v in (labels or {}).items())

    def add(self, *requirements: Requirement) -> "LabelSelector":
        if self._nothing:
            return self
        return LabelSelector(self._reqs + requirements)

    @property
    def empty(self) -> bool:
        return not self._reqs and not self._nothing

    @property
    def matches_nothing(self) -> bool:
        return self._nothing

    @property
    def requirements(self) -> list[Requirement]:
        return list(self._reqs)

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        if self._nothing:
            return False
        labels = labels or {}
        return all(r.matches(labels) for r in self._reqs)

    def exact_match_values(self, key: str) -> frozenset[str] | None:
        """Values ``key`` must take for a match, or None when it is not pinned.

        An empty set means no value can satisfy the selector (e.g. ``a=x,a=y``).
        """
        pinned: frozenset[str] | None = None
        for r in self._reqs:
            if r.key == key and r.operator in (EQUALS, DOUBLE_EQUALS, IN):
                vals = frozenset(r.values)
                pinned = vals if pinned is None else pinned & vals
        return pinned

    def __str__(self) -> str:
        return ",".join(str(r) for r in self._reqs)

    def __repr__(self) -> str:
        if self._nothing:
            return "LabelSelector.nothing()"
        return f"LabelSelector({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LabelSelector):
            return NotImplemented
        return self._reqs == other._reqs and self._nothing == other._nothing

    def __hash__(self) -> int:
        return hash((self._reqs, self._nothing))


# --- label selector string grammar ------------------------------------------------

# Token kinds.
_EOS = "end of string"
_IDENT = "identifier"
_OPEN = "("
_CLOSE = ")"
_COMMA = ","
_BANG = "!"
_EQ = "="
_EQEQ = "=="
_NEQ = "!="
_GT = ">"
_LT = "<"
_IN_KW = "in"
_NOTIN_KW = "notin"

_SYMBOL_TOKENS = {
    ")": _CLOSE,
    ",": _COMMA,
    "!": _BANG,
    "==": _EQEQ,
    "=": _EQ,
    ">": _GT,
    "<": _LT,
    "!=": _NEQ,
    "(": _OPEN,
}
_KEYWORDS = {"in": _IN_KW, "notin": _NOTIN_KW}
_SPECIAL = frozenset("=!(),><")
_WHITESPACE = frozenset(" \t\r\n")


class _Token(NamedTuple):
    kind: str
    text: str
    pos: int


def _lex(s: str) -> list[_Token]:
    tokens: list[_Token] = []
    i, n = 0, len(s)
    while True:
        while i < n and s[i] in _WHITESPACE:
            i += 1
        if i >= n:
            tokens.append(_Token(_EOS, "", n))
            return tokens
        start = i
        if s[i] in _SPECIAL:
            # Longest run of special characters that still spells a token.
            j = i + 1
            while j < n and s[j] in _SPECIAL and s[start : j + 1] in _SYMBOL_TOKENS:
                j += 1
            text = s[start:j]
            tokens.append(_Token(_SYMBOL_TOKENS[text], text, start))
            i = j
        else:
            while i < n and s[i] not in _SPECIAL and s[i] not in _WHITESPACE:
                i += 1
            text = s[start:i]
            tokens.append(_Token(_KEYWORDS.get(text, _IDENT), text, start))


class _LabelParser:
    # Mirrors upstream's recursive-descent parser, including which tokens are
    # accepted where, so that the same strings are accepted and rejected.

    def __init__(self, s: str):
        self.tokens = _lex(s)
        self.i = 0

    def _peek(self, values: bool = True) -> _Token:
        tok = self.tokens[self.i]
        # In value (and key) position the keywords are ordinary identifiers.
        if values and tok.kind in (_IN_KW, _NOTIN_KW):
            return tok._replace(kind=_IDENT)
        return tok

    def _next(self, values: bool = True) -> _Token:
        tok = self._peek(values)
        self.i += 1
        return tok

    @staticmethod
    def _fail(msg: str, tok: _Token, requirement: bool = True) -> SelectorError:
        if requirement:
            msg = "unable to parse requirement: " + msg
        return SelectorError(msg, token=tok.text, position=tok.pos)

    def parse(self) -> list[Requirement]:
        reqs: list[Requirement] = []
        while True:
            tok = self._peek()
            if tok.kind == _EOS:
                return reqs
            if tok.kind not in (_IDENT, _BANG):
                raise self._fail(f"found '{tok.text}', expected: !, identifier, or 'end of string'", tok, False)
            reqs.append(self._requirement())
            tok = self._next()
            if tok.kind == _EOS:
                return reqs
            if tok.kind == _COMMA:
                after = self._peek()
                if after.kind not in (_IDENT, _BANG):
                    raise self._fail(f"found '{after.text}', expected: identifier after ','", after, False)
                continue
            raise self._fail(f"found '{tok.text}', expected: ',' or 'end of string'", tok, False)

    def _requirement(self) -> Requirement:
        key_tok = self._next()
        negated = key_tok.kind == _BANG
        if negated:
            key_tok = self._next()
        if key_tok.kind != _IDENT:
            raise self._fail(f"found '{key_tok.text}', expected: identifier", key_tok)
        key = key_tok.text
        key_errs = is_qualified_name(key)
        if key_errs:
            raise self._fail(f"invalid label key {go_quote(key)}: {'; '.join(key_errs)}", key_tok)
        if negated:
            return Requirement(key, DOES_NOT_EXIST, ())
        if self._peek().kind in (_EOS, _COMMA):
            return Requirement(key, EXISTS, ())

        op_tok = self._next(values=False)
        op = {
            _IN_KW: IN,
            _NOTIN_KW: NOT_IN,
            _EQ: EQUALS,
            _EQEQ: DOUBLE_EQUALS,
            _NEQ: NOT_EQUALS,
            _GT: GREATER_THAN,
            _LT: LESS_THAN,
        }.get(op_tok.kind)
        if op is None:
            raise self._fail(f"found '{op_tok.text}', expected: {', '.join(_BINARY_OPERATORS)}", op_tok)
        values = self._set_values() if op in (IN, NOT_IN) else self._exact_value()

        for text, tok in values:
            errs = is_valid_label_value(text)
            if errs:
                raise self._fail(
                    f"invalid label value {go_quote(text)} for key {go_quote(key)}: {'; '.join(errs)}",
                    tok,
                )
            if op in (GREATER_THAN, LESS_THAN) and _parse_int64(text) is None:
                raise self._fail(f"for 'Gt', 'Lt' operators, the value must be an integer: {go_quote(text)}", tok)
        return Requirement(key, op, tuple(sorted({text for text, _ in values})))

    def _set_values(self) -> list[tuple[str, _Token]]:
        tok = self._next()
        if tok.kind != _OPEN:
            raise self._fail(f"found '{tok.text}' expected: '('", tok)
        tok = self._peek()
        if tok.kind == _CLOSE:  # "()" is the one empty value
            self._next()
            return [("", tok)]
        if tok.kind not in (_IDENT, _COMMA):
            raise self._fail(f"found '{tok.text}', expected: ',', ')' or identifier", tok)
        out: list[tuple[str, _Token]] = []
        while True:
            tok = self._next()
            if tok.kind == _IDENT:
                out.append((tok.text, tok))
                after = self._peek()
                if after.kind == _COMMA:
                    continue
                if after.kind == _CLOSE:
                    self._next()
                    return out
                raise self._fail(f"found '{after.text}', expected: ',' or ')'", after)
            if tok.kind == _COMMA:
                # Empty items between commas, or next to a parenthesis, are "".
                if not out:
                    out.append(("", tok))
                after = self._peek()
                if after.kind == _CLOSE:
                    out.append(("", after))
                    self._next()
                    return out
                if after.kind == _COMMA:
                    self._next()
                    out.append(("", after))
                continue
            raise self._fail(f"found '{tok.text}', expected: ',', or identifier", tok)

    def _exact_value(self) -> list[tuple[str, _Token]]:
        tok = self._peek()
        if tok.kind in (_EOS, _COMMA):
            return [("", tok)]
        tok = self._next()
        if tok.kind == _IDENT:
            return [(tok.text, tok)]
        raise self._fail(f"found '{tok.text}', expected: identifier", tok)


def parse_label_selector(s: str) -> LabelSelector:
    """Parse the ``labelSelector`` query syntax (upstream ``labels.Parse``)."""
    if not isinstance(s, str):
        raise TypeError(f"label selector must be a string, not {type(s).__name__}")
    return LabelSelector(_LabelParser(s).parse())


# --- structured (metav1.LabelSelector) form ---------------------------------------

_STRUCTURED_OPERATORS = {"In": IN, "NotIn": NOT_IN, "Exists": EXISTS, "DoesNotExist": DOES_NOT_EXIST}


def _child(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def validate_label_selector(d: Any, path: str = "") -> list[FieldError]:
    """Upstream ``ValidateLabelSelector`` for the ``{matchLabels, matchExpressions}`` form."""
    if d is None:
        return []
    if not isinstance(d, Mapping):
        return [FieldError.type_invalid(path or "selector", d, "must be an object")]
    errs: list[FieldError] = []
    errs.extend(validate_labels(d.get("matchLabels"), _child(path, "matchLabels")))
    exprs = d.get("matchExpressions")
    if exprs is None:
        return errs
    exprs_path = _child(path, "matchExpressions")
    if not isinstance(exprs, list):
        return errs + [FieldError.type_invalid(exprs_path, exprs, "must be an array")]
    for i, expr in enumerate(exprs):
        p = f"{exprs_path}[{i}]"
        if not isinstance(expr, Mapping):
            errs.append(FieldError.type_invalid(p, expr, "must be an object"))
            continue
        op = expr.get("operator")
        values = expr.get("values") or []
        values_ok = isinstance(values, list) and all(isinstance(v, str) for v in values)
        if not values_ok:
            errs.append(FieldError.type_invalid(f"{p}.values", values, "must be an array of strings"))
            values = []
        if op in ("In", "NotIn"):
            if not values and values_ok:
                errs.append(FieldError.required(f"{p}.values", "must be specified when `operator` is 'In' or 'NotIn'"))
        elif op in ("Exists", "DoesNotExist"):
            if values:
                errs.append(
                    FieldError.forbidden(
                        f"{p}.values", "may not be specified when `operator` is 'Exists' or 'DoesNotExist'"
                    )
                )
        else:
            errs.append(FieldError.invalid(f"{p}.operator", op, "not a valid selector operator"))
        key = expr.get("key", "")
        if not isinstance(key, str):
            errs.append(FieldError.type_invalid(f"{p}.key", key, "must be a string"))
        else:
            errs.extend(FieldError.invalid(f"{p}.key", key, m) for m in is_qualified_name(key))
        for j, v in enumerate(values):
            errs.extend(FieldError.invalid(f"{p}.values[{j}]", v, m) for m in is_valid_label_value(v))
    return errs


def label_selector_from_dict(d: Mapping[str, Any] | None, path: str = "") -> LabelSelector:
    """Upstream ``LabelSelectorAsSelector``: None selects nothing, ``{}`` everything."""
    if d is None:
        return LabelSelector.nothing()
    errs = validate_label_selector(d, path)
    if errs:
        raise SelectorError("; ".join(e.message() for e in errs))
    reqs = [Requirement(k, EQUALS, (v,)) for k, v in (d.get("matchLabels") or {}).items()]
    for expr in d.get("matchExpressions") or []:
        values = tuple(sorted(set(expr.get("values") or [])))
        reqs.append(Requirement(expr.get("key", ""), _STRUCTURED_OPERATORS[expr["operator"]], values))
    return LabelSelector(reqs)


# --- field selectors ----------------------------------------------------------------


class FieldRequirement(NamedTuple):
    """One ANDed term: ``(field, operator, value)``; operator is "=" or "!="."""

    field: str
    operator: str
    value: str

    def matches(self, fields: Mapping[str, str]) -> bool:
        # Absent fields compare as "", as upstream's Fields.Get does.
        have = fields.get(self.field, "")
        return have == self.value if self.operator == EQUALS else have != self.value

    def __str__(self) -> str:
        return f"{self.field}{self.operator}{escape_field_value(self.value)}"


def escape_field_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace(",", "\\,").replace("=", "\\=")


# Upstream recognises \\ \, \=; "\!" is accepted as well (never produced) so
# that values escaped by clients that treat '!' as special still parse.
_FIELD_ESCAPABLE = frozenset("\\,=!")


def unescape_field_value(raw: str, *, offset: int = 0) -> str:
    """Undo ``escape_field_value``; ``offset`` places error positions in a larger string."""
    if not any(c in raw for c in "\\,="):
        return raw
    out: list[str] = []
    i = 0
    while i < len(raw):
        c = raw[i]
        if c == "\\":
            if i + 1 >= len(raw):
                raise SelectorError(
                    "invalid field selector: invalid escape sequence: \\", token="\\", position=offset + i
                )
            nxt = raw[i + 1]
            if nxt not in _FIELD_ESCAPABLE:
                raise SelectorError(
                    f"invalid field selector: invalid escape sequence: \\{nxt}",
                    token="\\" + nxt,
                    position=offset + i,
                )
            out.append(nxt)
            i += 2
            continue
        if c in ",=":
            raise SelectorError(
                f"invalid field selector: unescaped character in value: '{c}'", token=c, position=offset + i
            )
        out.append(c)
        i += 1
    return "".join(out)


def _split_terms(s: str) -> Iterator[tuple[str, int]]:
    start, in_slash = 0, False
    for i, c in enumerate(s):
        if in_slash:
            in_slash = False
        elif c == "\\":
            in_slash = True
        elif c == ",":
            yield s[start:i], start
            start = i + 1
    yield s[start:], start


def _split_term(term: str) -> tuple[str, str, str, int] | None:
    # The field name has no escaping: the first operator splits the term, with
    # "!=" and "==" tried before "=" at each offset.
    for i in range(len(term)):
        for op in ("!=", "==", "="):
            if term.startswith(op, i):
                return term[:i], op, term[i + len(op) :], i + len(op)
    return None


class FieldSelector:
    """An AND of field terms; no terms selects everything."""

    __slots__ = ("_reqs",)

    def __init__(self, requirements: Iterable[FieldRequirement] = ()):
        self._reqs: tuple[FieldRequirement, ...] = tuple(sorted(requirements, key=str))

    @classmethod
    def everything(cls) -> "FieldSelector":
        return cls()

    @property
    def empty(self) -> bool:
        return not self._reqs

    @property
    def requirements(self) -> list[FieldRequirement]:
        return list(self._reqs)

    def matches(self, fields: Mapping[str, str]) -> bool:
        return all(r.matches(fields) for r in self._reqs)

    def exact_match(self, field: str) -> str | None:
        """The value an ``=`` term pins ``field`` to (``metadata.name=x`` lookups)."""
        for r in self._reqs:
            if r.field == field and r.operator == EQUALS:
                return r.value
        return None

    def validate_fields(self, allowed: Iterable[str]) -> "FieldSelector":
        allowed = set(allowed)
        for r in self._reqs:
            if r.field not in allowed:
                raise SelectorError(f"field label not supported: {r.field}", token=r.field)
        return self

    def __str__(self) -> str:
        return ",".join(str(r) for r in self._reqs)

    def __repr__(self) -> str:
        return f"FieldSelector({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, FieldSelector):
            return NotImplemented
        return self._reqs == other._reqs

    def __hash__(self) -> int:
        return hash(self._reqs)


def parse_field_selector(s: str) -> FieldSelector:
    """Parse the ``fieldSelector`` query syntax (upstream ``fields.ParseSelector``)."""
    if not isinstance(s, str):
        raise TypeError(f"field selector must be a string, not {type(s).__name__}")
    reqs: list[FieldRequirement] = []
    if not s:
        return FieldSelector()
    for term, start in _split_terms(s):
        if not term:
            continue
        split = _split_term(term)
        if split is None:
            raise SelectorError(
                f"invalid field selector {go_quote(s)}: expected a '=', '==' or '!=' operator in term {go_quote(term)}",
                token=term,
                position=start,
            )
        field, op, raw, value_at = split
        value = unescape_field_value(raw, offset=start + value_at)
        reqs.append(FieldRequirement(field, NOT_EQUALS if op == "!=" else EQUALS, value))
    return FieldSelector(reqs)
