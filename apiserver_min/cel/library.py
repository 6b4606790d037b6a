"""The Kubernetes CEL libraries, as functions of the engine.

- lists: ``isSorted``, ``sum``, ``min``, ``max``, ``indexOf``, ``lastIndexOf``;
- regex: ``find``, ``findAll`` (``matches`` is the standard one);
- URLs: ``isURL``, ``url`` and the URL's ``getScheme``, ``getHost``, ``getHostname``,
  ``getPort``, ``getEscapedPath``, ``getQuery``;
- quantities: ``isQuantity``, ``quantity`` and ``sign``, ``isInteger``, ``asInteger``,
  ``asApproximateFloat``, ``add``, ``sub``, ``isLessThan``, ``isGreaterThan``,
  ``compareTo`` (exact arithmetic on ``api/quantity.py``);
- the authorizer: ``authorizer.group(g).resource(r).namespace(ns).name(n).check(verb)``,
  ``authorizer.path(p).check(verb)``, ``authorizer.serviceAccount(ns, name)`` and the
  decision's ``allowed()``, ``reason()``, ``errored()``, ``error()``.

``ip()`` and ``cidr()`` came after 1.27: they are not declared, so an expression
using them is refused at compile time with "undeclared reference to 'ip'".

The engine's Python bindings cannot declare opaque types, so a URL, a quantity, an
authorizer step and a decision are maps carrying a type marker (``TYPE_KEY``); the
receiver functions check the marker, so ``{}.getHost()`` is a "no such overload"
error as upstream. A quantity keeps its canonical form, so equal quantities are equal
maps (``quantity('1000m') == quantity('1')``).
"""

from __future__ import annotations

import contextvars
import functools
import re
import urllib.parse
from collections.abc import Callable
from fractions import Fraction
from typing import Any

from ..api.quantity import Quantity, QuantityError

TYPE_KEY = "@orch.cel.type"

# The authorizer check of the evaluation running now: ``check(request) -> (allowed,
# reason, error)`` where ``request`` has ``verb`` and ``group``/``resource``/
# ``subresource``/``namespace``/``name`` or ``path``. Set around each evaluation.
AuthorizerCheck = Callable[[dict[str, str]], tuple[bool, str, str]]
CURRENT_AUTHORIZER: contextvars.ContextVar[AuthorizerCheck | None] = contextvars.ContextVar(
    "orch_cel_authorizer", default=None
)


class NoOverload(TypeError):
    pass


def _typed(kind: str, value: Any, receiver: str) -> dict:
    if not isinstance(value, dict) or value.get(TYPE_KEY) != kind:
        raise NoOverload(f"no such overload: {receiver}")
    return value


# --- lists ---------------------------------------------------------------------------


def _comparable(items: list) -> list:
    if any(isinstance(x, (dict, list)) or x is None for x in items):
        raise NoOverload("no such overload: list elements are not comparable")
    return items


def _is_sorted(items: list) -> bool:
    _comparable(items)
    return all(items[i] <= items[i + 1] for i in range(len(items) - 1))


def _sum(items: list) -> Any:
    if not items:
        return 0
    total = items[0]
    for x in items[1:]:
        total = total + x
    return total


def _min(items: list) -> Any:
    if not items:
        raise ValueError("min called on empty list")
    return min(_comparable(items))


def _max(items: list) -> Any:
    if not items:
        raise ValueError("max called on empty list")
    return max(_comparable(items))


def _index_of(items: list, value: Any) -> int:
    for i, x in enumerate(items):
        if x == value and type(x) is type(value):
            return i
    return -1


def _last_index_of(items: list, value: Any) -> int:
    for i in range(len(items) - 1, -1, -1):
        if items[i] == value and type(items[i]) is type(value):
            return i
    return -1


# --- strings (the standard extension: charAt, indexOf, join, lowerAscii, ...) --------


def _char_at(s: str, i: int) -> str:
    if i < 0 or i > len(s):
        raise ValueError(f"index out of range: {i}")
    return s[i : i + 1]


def _str_index(s: str, sub: str, start: int = 0) -> int:
    if start < 0 or start > len(s):
        raise ValueError(f"index out of range: {start}")
    return s.find(sub, start)


def _str_last_index(s: str, sub: str, end: int | None = None) -> int:
    if end is None:
        return s.rfind(sub)
    if end < 0 or end > len(s):
        raise ValueError(f"index out of range: {end}")
    return s.rfind(sub, 0, end + len(sub))


def _substring(s: str, start: int, end: int | None = None) -> str:
    end = len(s) if end is None else end
    if start < 0 or start > len(s) or end < start or end > len(s):
        raise ValueError(f"index out of range: {start if start < 0 or start > len(s) else end}")
    return s[start:end]


def _replace(s: str, old: str, new: str, n: int = -1) -> str:
    return s.replace(old, new, n)


def _split(s: str, sep: str, n: int = -1) -> list[str]:
    if n == 0:
        return []
    if sep == "":
        parts = list(s)
        return parts if n < 0 or n >= len(parts) else parts[: n - 1] + ["".join(parts[n - 1 :])]
    return s.split(sep, n - 1) if n > 0 else s.split(sep)


def _join(items: list, sep: str = "") -> str:
    if not all(isinstance(x, str) for x in items):
        raise NoOverload("no such overload: join")
    return sep.join(items)


def _ascii(s: str, upper: bool) -> str:
    return "".join((c.upper() if upper else c.lower()) if c.isascii() else c for c in s)


# --- regex ---------------------------------------------------------------------------


# RE2, as upstream's regular expressions: linear time, so no pattern can stall the
# server (Python's backtracking ``re`` can, on patterns such as ``(a+)+$``).
@functools.cache
def _re2() -> tuple[Any, Any]:
    """RE2 and its options, loaded with the first pattern an expression searches for
    (like the engine, most servers never need it)."""
    import re2

    options = re2.Options()
    options.log_errors = False
    return re2, options


@functools.lru_cache(maxsize=256)
def regex(pattern: str) -> Any:
    """``pattern`` compiled by RE2 (cached); ValueError, in upstream's words, when RE2
    refuses it."""
    re2, options = _re2()
    try:
        return re2.compile(pattern, options=options)
    except re2.error as exc:
        detail = exc.args[0].decode(errors="replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        raise ValueError(f"error parsing regexp: {detail}") from None


@functools.cache
def _unanchored() -> Any:
    """The RE2 module's "search anywhere" anchor (None where the module lacks it)."""
    return getattr(getattr(_re2()[0], "_Anchor", None), "UNANCHORED", None)


def regex_found(pattern: str, s: str) -> bool:
    """Whether RE2 finds ``pattern`` anywhere in ``s`` (CEL's ``matches``); ValueError as
    ``regex``. Asks the compiled pattern directly: the module's ``search`` builds a match
    object and its offsets in characters, five times the cost of the search itself."""
    compiled = regex(pattern)
    low = getattr(compiled, "_regexp", None)
    anchor = _unanchored()
    if low is None or anchor is None:
        return compiled.search(s) is not None
    text = s.encode()
    return bool(low.Match(anchor, text, 0, len(text))[0] != (-1, -1))


def _find(s: str, pattern: str) -> str:
    m = regex(pattern).search(s)
    return m.group(0) if m else ""


def _find_all(s: str, pattern: str, limit: int = -1) -> list[str]:
    if limit == 0:
        return []
    out = [m.group(0) for m in regex(pattern).finditer(s)]
    return out if limit < 0 else out[:limit]


# --- URLs ----------------------------------------------------------------------------


def _parse_url(s: str) -> urllib.parse.SplitResult | None:
    """A URL as upstream's url() accepts it: absolute (with a scheme) or an absolute
    path; None when it is not one."""
    if not s or any(c in s for c in " \t\n") and not s.startswith("/"):
        return None
    try:
        parts = urllib.parse.urlsplit(s)
        parts.port  # noqa: B018 - reading the port validates it
    except ValueError:
        return None
    if parts.scheme:
        if not re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]*", parts.scheme):
            return None
        return parts
    return parts if s.startswith("/") else None


def _is_url(s: str) -> bool:
    return _parse_url(s) is not None


def _url(s: str) -> dict:
    parts = _parse_url(s)
    if parts is None:
        raise ValueError(f"URL parse error during conversion from string: parse {s!r}: invalid URI for request")
    return {TYPE_KEY: "URL", "url": s}


def _url_parts(u: Any, name: str) -> urllib.parse.SplitResult:
    parts = _parse_url(_typed("URL", u, name)["url"])
    assert parts is not None
    return parts


def _host(u: Any) -> str:
    return _url_parts(u, "getHost").netloc.rpartition("@")[2]


def _hostname(u: Any) -> str:
    host = _host(u)
    if host.startswith("["):
        return host[1 : host.index("]")]
    return host.rpartition(":")[0] if ":" in host else host


def _port(u: Any) -> str:
    host = _host(u)
    if host.startswith("["):
        rest = host[host.index("]") + 1 :]
        return rest[1:] if rest.startswith(":") else ""
    return host.rpartition(":")[2] if ":" in host else ""


def _query(u: Any) -> dict[str, list[str]]:
    return urllib.parse.parse_qs(_url_parts(u, "getQuery").query, keep_blank_values=True)


# --- quantities ----------------------------------------------------------------------


def _q(value: Any, name: str) -> Quantity:
    return Quantity.parse(_typed("Quantity", value, name)["q"])


def _qmap(q: Quantity) -> dict:
    return {TYPE_KEY: "Quantity", "q": q.canonical()}


def _is_quantity(s: str) -> bool:
    try:
        Quantity.parse(s)
    except (QuantityError, ValueError):
        return False
    return True


def _quantity(s: str) -> dict:
    try:
        return _qmap(Quantity.parse(s))
    except (QuantityError, ValueError) as exc:
        raise ValueError(f"quantities must match the regular expression: {exc}") from None


def _q_other(other: Any, name: str) -> Quantity:
    if isinstance(other, int) and not isinstance(other, bool):
        return Quantity(other)
    return _q(other, name)


def _as_integer(value: Any) -> int:
    frac = _q(value, "asInteger").as_fraction()
    if frac.denominator != 1 or not -(2**63) <= frac.numerator < 2**63:
        raise ValueError("cannot convert value to integer")
    return frac.numerator


def _is_integer(value: Any) -> bool:
    frac: Fraction = _q(value, "isInteger").as_fraction()
    return frac.denominator == 1 and -(2**63) <= frac.numerator < 2**63


def _compare(a: Any, b: Any) -> int:
    qa, qb = _q(a, "compareTo"), _q(b, "compareTo")
    return (qa > qb) - (qa < qb)


# --- the authorizer ------------------------------------------------------------------


def authorizer_value() -> dict:
    """The ``authorizer`` variable."""
    return {TYPE_KEY: "Authorizer"}


def _authz_step(value: Any, name: str, field: str, arg: str) -> dict:
    if not isinstance(value, dict) or value.get(TYPE_KEY) not in ("Authorizer", "GroupCheck", "ResourceCheck"):
        raise NoOverload(f"no such overload: {name}")
    out = dict(value)
    out[TYPE_KEY] = "GroupCheck" if field == "group" and value.get(TYPE_KEY) == "Authorizer" else "ResourceCheck"
    out[field] = arg
    return out


def _authz_path(value: Any, path: str) -> dict:
    _typed("Authorizer", value, "path")
    return {TYPE_KEY: "PathCheck", "path": path}


def _authz_service_account(value: Any, namespace: str, name: str) -> dict:
    _typed("Authorizer", value, "serviceAccount")
    return {TYPE_KEY: "Authorizer", "user": f"system:serviceaccount:{namespace}:{name}"}


def _authz_check(value: Any, verb: str) -> dict:
    if not isinstance(value, dict) or value.get(TYPE_KEY) not in ("ResourceCheck", "PathCheck", "GroupCheck"):
        raise NoOverload("no such overload: check")
    check = CURRENT_AUTHORIZER.get()
    request = {k: v for k, v in value.items() if k != TYPE_KEY and isinstance(v, str)}
    request["verb"] = verb
    if check is None:
        allowed, reason, error = False, "", "no authorizer is available"
    else:
        allowed, reason, error = check(request)
    return {TYPE_KEY: "Decision", "allowed": allowed, "reason": reason, "error": error}


def _decision(value: Any, name: str) -> dict:
    return _typed("Decision", value, name)


# --- declarations --------------------------------------------------------------------

# The element types ``indexOf``/``lastIndexOf`` take, by the engine's type constant
# (the engine dispatches on concrete types: one overload each).
_ELEMENT_TYPES = ("string", "int", "uint", "double", "bool", "bytes", "list", "map", "duration", "timestamp")


def declarations(cel: Any) -> list:
    """The library's function declarations for ``NewEnv(functions=...)``; ``cel``: the
    engine's bindings (``cel_expr_python.cel``, loaded by the engine on first use)."""
    T = cel.Type

    def _ov(name: str, ret: Any, params: list, impl: Callable, member: bool = False) -> Any:
        return cel.Overload(name, ret, params, is_member=member, impl=impl)

    L, M, S, D, I, B = T.LIST, T.MAP, T.STRING, T.DYN, T.INT, T.BOOL  # noqa: E741 - short type names
    fns = {
        "isSorted": [_ov("list_is_sorted", B, [L], _is_sorted, True)],
        "sum": [_ov("list_sum", D, [L], _sum, True)],
        "min": [_ov("list_min", D, [L], _min, True)],
        "max": [_ov("list_max", D, [L], _max, True)],
        "indexOf": [
            *(_ov(f"list_index_of_{n}", I, [L, getattr(T, n.upper())], _index_of, True) for n in _ELEMENT_TYPES),
            _ov("string_index_of", I, [S, S], _str_index, True),
            _ov("string_index_of_offset", I, [S, S, I], _str_index, True),
        ],
        "lastIndexOf": [
            *(
                _ov(f"list_last_index_of_{n}", I, [L, getattr(T, n.upper())], _last_index_of, True)
                for n in _ELEMENT_TYPES
            ),
            _ov("string_last_index_of", I, [S, S], _str_last_index, True),
            _ov("string_last_index_of_offset", I, [S, S, I], _str_last_index, True),
        ],
        "charAt": [_ov("string_char_at", S, [S, I], _char_at, True)],
        "lowerAscii": [_ov("string_lower_ascii", S, [S], lambda s: _ascii(s, False), True)],
        "upperAscii": [_ov("string_upper_ascii", S, [S], lambda s: _ascii(s, True), True)],
        "replace": [
            _ov("string_replace", S, [S, S, S], _replace, True),
            _ov("string_replace_n", S, [S, S, S, I], _replace, True),
        ],
        "split": [
            _ov("string_split", T.List(S), [S, S], _split, True),
            _ov("string_split_n", T.List(S), [S, S, I], _split, True),
        ],
        "substring": [
            _ov("string_substring", S, [S, I], _substring, True),
            _ov("string_substring_range", S, [S, I, I], _substring, True),
        ],
        "trim": [_ov("string_trim", S, [S], lambda s: s.strip(), True)],
        "join": [_ov("list_join", S, [L], _join, True), _ov("list_join_sep", S, [L, S], _join, True)],
        "find": [_ov("string_find", S, [S, S], _find, True)],
        "findAll": [
            _ov("string_find_all", T.List(S), [S, S], _find_all, True),
            _ov("string_find_all_n", T.List(S), [S, S, I], _find_all, True),
        ],
        "isURL": [_ov("is_url_string", B, [S], _is_url)],
        "url": [_ov("string_to_url", M, [S], _url)],
        "getScheme": [_ov("url_get_scheme", S, [M], lambda u: _url_parts(u, "getScheme").scheme, True)],
        "getHost": [_ov("url_get_host", S, [M], _host, True)],
        "getHostname": [_ov("url_get_hostname", S, [M], _hostname, True)],
        "getPort": [_ov("url_get_port", S, [M], _port, True)],
        "getEscapedPath": [_ov("url_get_escaped_path", S, [M], lambda u: _url_parts(u, "getEscapedPath").path, True)],
        "getQuery": [_ov("url_get_query", T.Map(S, T.List(S)), [M], _query, True)],
        "isQuantity": [_ov("is_quantity_string", B, [S], _is_quantity)],
        "quantity": [_ov("string_to_quantity", M, [S], _quantity)],
        "sign": [_ov("quantity_sign", I, [M], lambda q: _q(q, "sign").sign(), True)],
        "isInteger": [_ov("quantity_is_integer", B, [M], _is_integer, True)],
        "asInteger": [_ov("quantity_as_integer", I, [M], _as_integer, True)],
        "asApproximateFloat": [
            _ov("quantity_as_float", T.DOUBLE, [M], lambda q: float(_q(q, "asApproximateFloat").as_fraction()), True)
        ],
        "add": [
            _ov("quantity_add", M, [M, M], lambda a, b: _qmap(_q(a, "add") + _q_other(b, "add")), True),
            _ov("quantity_add_int", M, [M, I], lambda a, b: _qmap(_q(a, "add") + _q_other(b, "add")), True),
        ],
        "sub": [
            _ov("quantity_sub", M, [M, M], lambda a, b: _qmap(_q(a, "sub") - _q_other(b, "sub")), True),
            _ov("quantity_sub_int", M, [M, I], lambda a, b: _qmap(_q(a, "sub") - _q_other(b, "sub")), True),
        ],
        "isLessThan": [_ov("quantity_less", B, [M, M], lambda a, b: _compare(a, b) < 0, True)],
        "isGreaterThan": [_ov("quantity_greater", B, [M, M], lambda a, b: _compare(a, b) > 0, True)],
        "compareTo": [_ov("quantity_compare", I, [M, M], _compare, True)],
        "group": [_ov("authorizer_group", M, [M, S], lambda a, g: _authz_step(a, "group", "group", g), True)],
        "resource": [
            _ov("authorizer_resource", M, [M, S], lambda a, r: _authz_step(a, "resource", "resource", r), True)
        ],
        "subresource": [
            _ov("authorizer_subresource", M, [M, S], lambda a, s: _authz_step(a, "subresource", "subresource", s), True)
        ],
        "namespace": [
            _ov("authorizer_namespace", M, [M, S], lambda a, n: _authz_step(a, "namespace", "namespace", n), True)
        ],
        "name": [_ov("authorizer_name", M, [M, S], lambda a, n: _authz_step(a, "name", "name", n), True)],
        "path": [_ov("authorizer_path", M, [M, S], _authz_path, True)],
        "serviceAccount": [_ov("authorizer_service_account", M, [M, S, S], _authz_service_account, True)],
        "check": [_ov("authorizer_check", M, [M, S], _authz_check, True)],
        "allowed": [_ov("decision_allowed", B, [M], lambda d: bool(_decision(d, "allowed")["allowed"]), True)],
        "reason": [_ov("decision_reason", S, [M], lambda d: str(_decision(d, "reason")["reason"]), True)],
        "errored": [_ov("decision_errored", B, [M], lambda d: bool(_decision(d, "errored")["error"]), True)],
        "error": [_ov("decision_error", S, [M], lambda d: str(_decision(d, "error")["error"]), True)],
    }
    return [cel.FunctionDecl(name, overloads) for name, overloads in fns.items()]
