"""A quick check that an expression holds, in Python, for the plain forms of most
validation rules: comparisons of fields, ``size``, ``has``, string tests, ``matches``,
``all``/``exists`` over a list, joined with ``&&``, ``||`` and ``!``.

The engine stays the judge. :func:`compile_quick` accepts only expressions made of the
parts below (anything else: None, no quick path), and a quick program answers only
"certainly true": every value it meets must have the exact type the operation is
defined for here, and anything else (a missing key, a type it does not handle, an
overflow, a pattern RE2 refuses) makes the answer "not known", and the caller asks
the engine. So a quick answer never differs from the engine's; it only skips the
engine's call, which costs 10-40 us where this costs a few (the engine's C++ code is
cold in the server's cache between requests).

The parts, with CEL's meaning:

- literals: decimal integers (64-bit), decimals (``1.5``), strings in single or
  double quotes without escapes, ``true``, ``false``;
- variables (the names given) and the loop variable of a macro;
- ``a.f`` (a map's key ``f``; an absent key is CEL's "no such key" error),
  ``a[i]`` (a list's item, a map's key), ``has(a.f)``;
- ``! - && ||``: errors are absorbed as CEL absorbs them (``false && error`` is
  false, ``true || error`` is true);
- ``== != < <= > >=`` on two values of the same type among int, double, string and
  bool (CEL orders strings by code point, as Python does); ``in`` on a list of such
  values or a map's keys;
- ``+ - * / %`` on ints, checked for 64-bit overflow (``/`` truncates and ``%`` takes
  the dividend's sign, as CEL's); ``+`` on strings;
- ``size(x)``/``x.size()`` (a string's code points, a list's or map's entries);
  ``startsWith``, ``endsWith``, ``contains``, ``matches`` (RE2, a partial match);
- ``x.all(v, p)``, ``x.exists(v, p)`` over a list or a map's keys.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from . import library
from .cost import tokens

_INT_MIN = -(2**63)
_INT_MAX = 2**63 - 1
_UINT_END = 2**64
_NESTED_OR_INT = (dict, list, int)
# Patterns longer than this are left to the engine (which limits a compiled pattern's size).
_PATTERN_LIMIT = 256


class _Unknown(Exception):
    """An evaluation the quick path cannot answer (the engine's error, or a case not
    handled here)."""


_UNKNOWN = _Unknown()
# Types compared and tested as equal here: exactly these (a bool is no int here).
_SCALARS = (int, float, str, bool)

Node = Callable[[dict[str, Any]], Any]


class QuickProgram:
    """An expression of the quick parts, ready to check against plain values."""

    __slots__ = ("expression", "_root")

    def __init__(self, expression: str, root: Node):
        self.expression = expression
        self._root = root

    def holds(self, data: Mapping[str, Any]) -> bool:
        """True only when the expression certainly evaluates to ``true`` on ``data``
        (variable -> plain value, as the engine's activation would get it); False when
        it evaluates to something else or the quick path cannot tell."""
        try:
            return self._root(dict(data)) is True and all(_convertible(x) for x in data.values())
        except Exception:  # _Unknown, or anything unforeseen: the engine decides
            return False


def _convertible(value: Any) -> bool:
    """Whether the engine takes ``value`` in: it refuses (the whole evaluation) an int
    below -2**63 or from 2**64 on, wherever it sits."""
    t = type(value)
    if t is int:
        return _INT_MIN <= value < _UINT_END
    if t is dict:
        for x in value.values():
            if type(x) in _NESTED_OR_INT and not _convertible(x):
                return False
    elif t is list:
        for x in value:
            if type(x) in _NESTED_OR_INT and not _convertible(x):
                return False
    return True


class _Unsupported(Exception):
    """The expression uses a part the quick path does not have."""


def compile_quick(expression: str, variables: frozenset[str] | set[str]) -> QuickProgram | None:
    """The quick program of ``expression`` (which the engine has already compiled),
    or None when it uses any part not listed in the module's documentation."""
    try:
        toks = [(kind, text) for kind, text in tokens(expression)]
        parser = _Parser(toks, frozenset(variables))
        root = parser.expr(frozenset())
        if parser.pos != len(toks):
            return None
    except (_Unsupported, IndexError, ValueError, RecursionError):
        return None
    return QuickProgram(expression, root)


_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_FUNCTIONS = frozenset({"size", "startsWith", "endsWith", "contains", "matches", "all", "exists"})
_RESERVED = frozenset({"true", "false", "null", "in", "as", "break", "const", "continue", "else", "for"})
_RESERVED |= frozenset({"function", "if", "import", "let", "loop", "package", "namespace", "return", "var", "void"})
_RESERVED |= frozenset({"while"})


class _Parser:
    """Recursive descent over the cost model's tokens, CEL's precedence:
    ``||`` < ``&&`` < relations < ``+ -`` < ``* / %`` < unary < member < primary."""

    def __init__(self, toks: list[tuple[str, str]], variables: frozenset[str]):
        self.toks = toks
        self.pos = 0
        self.variables = variables

    def peek(self) -> str:
        return self.toks[self.pos][1] if self.pos < len(self.toks) else ""

    def take(self, text: str | None = None) -> tuple[str, str]:
        tok = self.toks[self.pos]
        if text is not None and tok[1] != text:
            raise _Unsupported(text)
        self.pos += 1
        return tok

    def expr(self, loop: frozenset[str]) -> Node:
        node = self.or_(loop)
        if self.peek() == "?":
            raise _Unsupported("?:")
        return node

    def or_(self, loop: frozenset[str]) -> Node:
        return self.junctions(loop, "||", self.and_, True)

    def and_(self, loop: frozenset[str]) -> Node:
        return self.junctions(loop, "&&", self.relation, False)

    def junctions(
        self, loop: frozenset[str], op: str, operand: Callable[[frozenset[str]], Node], absorbing: bool
    ) -> Node:
        node = operand(loop)
        while self.peek() == op:
            self.take()
            node = _junction(node, operand(loop), absorbing)
        return node

    def relation(self, loop: frozenset[str]) -> Node:
        node = self.additive(loop)
        op = self.peek()
        if op in _RELATIONS or (op == "in" and self.toks[self.pos][0] == "id"):
            self.take()
            right = self.additive(loop)
            if self.peek() in _RELATIONS or self.peek() == "in":
                raise _Unsupported("chained relation")  # CEL parses these left to right; rare
            node = _in(node, right) if op == "in" else _relation(_RELATIONS[op], node, right)
        return node

    def additive(self, loop: frozenset[str]) -> Node:
        node = self.multiplicative(loop)
        while self.peek() in ("+", "-"):
            op = self.take()[1]
            node = _arith(op, node, self.multiplicative(loop))
        return node

    def multiplicative(self, loop: frozenset[str]) -> Node:
        node = self.unary(loop)
        while self.peek() in ("*", "/", "%"):
            op = self.take()[1]
            node = _arith(op, node, self.unary(loop))
        return node

    def unary(self, loop: frozenset[str]) -> Node:
        if self.peek() == "!":
            self.take()
            return _not(self.unary(loop))
        if self.peek() == "-":
            self.take()
            kind, text = self.toks[self.pos] if self.pos < len(self.toks) else ("", "")
            if kind == "num":  # a negative literal (-9223372036854775808 included)
                self.take()
                return self.member(_literal_number("-" + text), loop)
            return _negate(self.unary(loop))
        return self.member(self.primary(loop), loop)

    def primary(self, loop: frozenset[str]) -> Node:
        kind, text = self.take()
        if kind == "num":
            return _literal_number(text)
        if kind == "str":
            return _literal(_string(text))
        if kind == "id":
            if text == "true" or text == "false":
                return _literal(text == "true")
            if text in _RESERVED:
                raise _Unsupported(text)
            if self.peek() == "(":
                return self.call(text, loop)
            if text in loop:
                return _variable(text)
            if text in self.variables:
                return _variable(text)
            raise _Unsupported(text)
        if text == "(":
            node = self.expr(loop)
            self.take(")")
            return node
        if text == "[":
            items = []
            while self.peek() != "]":
                items.append(self.expr(loop))
                if self.peek() == ",":
                    self.take()
                elif self.peek() != "]":
                    raise _Unsupported("list literal")
            self.take("]")
            return _list(items)
        raise _Unsupported(text)

    def call(self, name: str, loop: frozenset[str]) -> Node:
        self.take("(")
        arg = self.expr(loop)
        self.take(")")
        if name == "has":
            if not isinstance(arg, _Select):
                raise _Unsupported("has")  # has() takes a selection a.f
            return _has(arg.target, arg.name)
        if name != "size":
            raise _Unsupported(name)
        return _size(arg)

    def member(self, node: Node, loop: frozenset[str]) -> Node:
        while True:
            nxt = self.peek()
            if nxt == ".":
                self.take()
                kind, name = self.take()
                if kind != "id":
                    raise _Unsupported(name)
                if self.peek() == "(":
                    node = self.method(node, name, loop)
                else:
                    node = _Select(node, name)
            elif nxt == "[":
                self.take()
                index = self.expr(loop)
                self.take("]")
                node = _index(node, index)
            else:
                return node

    def method(self, target: Node, name: str, loop: frozenset[str]) -> Node:
        if name not in _FUNCTIONS:
            raise _Unsupported(name)
        self.take("(")
        if name in ("all", "exists"):
            kind, var = self.take()
            if kind != "id" or var in _RESERVED or var in self.variables:
                raise _Unsupported("macro variable")
            self.take(",")
            body = self.expr(loop | {var})
            self.take(")")
            return _quantifier(target, var, body, name == "exists")
        if name == "size":
            self.take(")")
            return _size(target)
        arg = self.expr(loop)
        self.take(")")
        return _string_test(name, target, arg)


def _string(text: str) -> str:
    if text[0] in "rR" or "\\" in text:
        raise _Unsupported("string literal")
    return text[1:-1]


def _literal(value: Any) -> Node:
    return lambda env: value


def _literal_number(text: str) -> Node:
    if _NUMBER.fullmatch(text.lstrip("-")) is None:
        raise _Unsupported(text)  # hex, unsigned, exponents
    if "." in text:
        return _literal(float(text))
    value = int(text)
    if not _INT_MIN <= value <= _INT_MAX:
        raise _Unsupported(text)
    return _literal(value)


def _variable(name: str) -> Node:
    def node(env: dict[str, Any]) -> Any:
        try:
            return env[name]
        except KeyError:
            raise _UNKNOWN from None

    return node


def _list(items: list[Node]) -> Node:
    return lambda env: [item(env) for item in items]


class _Select:
    """``target.name``: a map's key (kept as a class, for ``has``)."""

    __slots__ = ("target", "name")

    def __init__(self, target: Node, name: str):
        self.target = target
        self.name = name

    def __call__(self, env: dict[str, Any]) -> Any:
        value = self.target(env)
        if type(value) is not dict:
            raise _UNKNOWN  # not a map
        try:
            return value[self.name]
        except KeyError:
            raise _UNKNOWN from None  # no such key


def _index(target: Node, index: Node) -> Node:
    def node(env: dict[str, Any]) -> Any:
        value, i = target(env), index(env)
        if type(value) is list and type(i) is int and 0 <= i < len(value):
            return value[i]
        if type(value) is dict and type(i) is str and i in value:
            return value[i]
        raise _UNKNOWN

    return node


def _has(target: Node, name: str) -> Node:
    def node(env: dict[str, Any]) -> Any:
        value = target(env)
        if type(value) is not dict:
            raise _UNKNOWN
        return name in value

    return node


def _in_range(value: int) -> bool:
    return _INT_MIN <= value <= _INT_MAX


def _bool(value: Any) -> bool:
    if type(value) is not bool:
        raise _UNKNOWN  # no such overload
    return value


def _junction(left: Node, right: Node, absorbing: bool) -> Node:
    """``left || right`` (``absorbing`` True) or ``left && right`` (False): the
    absorbing value on either side decides, even against an error on the other."""

    def node(env: dict[str, Any]) -> Any:
        try:
            a = _bool(left(env))
        except _Unknown:
            if _bool(right(env)) is absorbing:
                return absorbing
            raise
        if a is absorbing:
            return absorbing
        return _bool(right(env))

    return node


def _not(operand: Node) -> Node:
    return lambda env: not _bool(operand(env))


def _negate(operand: Node) -> Node:
    def node(env: dict[str, Any]) -> Any:
        value = operand(env)
        if type(value) is not int or not _in_range(value) or value == _INT_MIN:
            raise _UNKNOWN
        return -value

    return node


def _lt(a: Any, b: Any) -> bool:
    return a < b


def _le(a: Any, b: Any) -> bool:
    return a <= b


def _gt(a: Any, b: Any) -> bool:
    return a > b


def _ge(a: Any, b: Any) -> bool:
    return a >= b


def _eq(a: Any, b: Any) -> bool:
    return a == b


def _ne(a: Any, b: Any) -> bool:
    return a != b


_RELATIONS: dict[str, Callable[[Any, Any], bool]] = {
    "<": _lt,
    "<=": _le,
    ">": _gt,
    ">=": _ge,
    "==": _eq,
    "!=": _ne,
}


def _relation(op: Callable[[Any, Any], bool], left: Node, right: Node) -> Node:
    def node(env: dict[str, Any]) -> Any:
        a, b = left(env), right(env)
        t = type(a)
        if t is not type(b) or t not in _SCALARS or (t is int and not (_in_range(a) and _in_range(b))):
            raise _UNKNOWN  # mixed or composite values, or ints past 64 bits: the engine decides
        return op(a, b)

    return node


def _in(left: Node, right: Node) -> Node:
    def node(env: dict[str, Any]) -> Any:
        a, b = left(env), right(env)
        t = type(a)
        if t not in _SCALARS or (t is int and not _in_range(a)):
            raise _UNKNOWN
        if type(b) is dict:
            if t is not str or not all(type(k) is str for k in b):
                raise _UNKNOWN
            return a in b
        if type(b) is not list or not all(type(x) is t for x in b):
            raise _UNKNOWN
        if t is int and not all(_in_range(x) for x in b):
            raise _UNKNOWN
        return a in b

    return node


def _arith(op: str, left: Node, right: Node) -> Node:
    def node(env: dict[str, Any]) -> Any:
        a, b = left(env), right(env)
        if op == "+" and type(a) is str and type(b) is str:
            return a + b
        if type(a) is not int or type(b) is not int or not (_in_range(a) and _in_range(b)):
            raise _UNKNOWN
        if op == "+":
            out = a + b
        elif op == "-":
            out = a - b
        elif op == "*":
            out = a * b
        else:
            if b == 0:
                raise _UNKNOWN  # division or modulus by zero
            q = abs(a) // abs(b)
            q = q if (a >= 0) == (b >= 0) else -q  # truncated toward zero
            if not _in_range(q):
                raise _UNKNOWN  # the lowest int divided by -1 (CEL: overflow, for % too)
            out = q if op == "/" else a - b * q
        if not _INT_MIN <= out <= _INT_MAX:
            raise _UNKNOWN  # overflow
        return out

    return node


def _size(operand: Node) -> Node:
    def node(env: dict[str, Any]) -> Any:
        value = operand(env)
        if type(value) in (str, list, dict):
            return len(value)  # a string's code points, as CEL counts them
        raise _UNKNOWN

    return node


def _string_test(name: str, target: Node, arg: Node) -> Node:
    def node(env: dict[str, Any]) -> Any:
        s, x = target(env), arg(env)
        if type(s) is not str or type(x) is not str:
            raise _UNKNOWN
        if name == "startsWith":
            return s.startswith(x)
        if name == "endsWith":
            return s.endswith(x)
        if name == "contains":
            return x in s
        if len(x) > _PATTERN_LIMIT:
            raise _UNKNOWN  # the engine bounds a pattern's program size: it decides
        try:
            return library.regex_found(x, s)
        except ValueError:
            raise _UNKNOWN from None  # a pattern RE2 refuses: the engine's error

    return node


def _range(value: Any) -> list[Any]:
    if type(value) is list:
        return value
    if type(value) is dict:
        return list(value)
    raise _UNKNOWN


def _quantifier(target: Node, var: str, body: Node, deciding: bool) -> Node:
    """``target.all(var, body)`` (``deciding`` False: an item for which the body is
    false makes it false) or ``target.exists(var, body)`` (True: an item for which it
    is true makes it true); an error on another item does not change that."""

    def node(env: dict[str, Any]) -> Any:
        unknown = False
        saved = env.get(var, _Unsupported)
        try:
            for item in _range(target(env)):
                env[var] = item
                try:
                    if _bool(body(env)) is deciding:
                        return deciding
                except _Unknown:
                    unknown = True
        finally:
            if saved is _Unsupported:
                env.pop(var, None)
            else:
                env[var] = saved
        if unknown:
            raise _UNKNOWN
        return not deciding

    return node
