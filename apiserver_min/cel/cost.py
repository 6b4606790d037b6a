"""The cost model: an estimate at compile time, a budget at evaluation.

Upstream limits each expression twice: its *estimated* cost, worked out from the
expression and the size bounds of what it reads, must stay within
``ESTIMATED_COST_LIMIT`` (else the object declaring it is refused), and its
*actual* cost while running within ``PER_CALL_LIMIT`` (else the evaluation fails with
"operation cancelled: actual cost limit exceeded").

The engine reports neither, so both come from this module's own model, over the
expression's tokens:

- every name (a variable, a field selected, a function called) and every operator
  costs 1; literals and punctuation cost nothing;
- a comprehension (``all``, ``exists``, ``exists_one``, ``map``, ``filter``)
  multiplies the cost of everything inside its parentheses by the size of the list
  it ranges over: the element count of a list literal, else the list bound;
- a string scan (``matches``, ``find``, ``findAll``, ``contains``, ``lowerAscii``,
  ``upperAscii``, ``split``, ``replace``) costs a tenth of the string bound (upstream's
  traversal factor) times the length of a literal pattern (at least one); inside a
  comprehension one list factor is dropped, since the strings of all the elements
  share one request body (N strings of length s: N * s <= the body size);
  ``startsWith``/``endsWith`` cost a tenth of their literal argument;
- list functions that walk a list (``isSorted``, ``sum``, ``min``, ``max``,
  ``indexOf``, ``lastIndexOf``, ``in``) cost the list bound.

At compile time the bounds are those of a request body: ``object``, ``oldObject`` and
``params`` are untyped, so a list may hold up to ``MAX_REQUEST_BYTES / 2`` elements
(one character and a comma each) and a string ``MAX_REQUEST_BYTES`` characters, as
upstream bounds an unbounded field by the request size. At evaluation the same model
is applied with the largest list and string the activation actually holds, and an
evaluation whose cost passes ``PER_CALL_LIMIT`` is cancelled before it runs. The
approximation: the model reads tokens, not the typed syntax tree, so it cannot tell
which list a comprehension ranges over; it takes the largest, which over-counts.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any

ESTIMATED_COST_LIMIT = 10_000_000  # upstream's StaticEstimatedCostLimit, per expression
PER_CALL_LIMIT = 1_000_000  # upstream's PerCallLimit, per evaluation
MAX_REQUEST_BYTES = 3 * 1024 * 1024
LIST_BOUND = MAX_REQUEST_BYTES // 2
STRING_BOUND = MAX_REQUEST_BYTES

COMPREHENSIONS = frozenset({"all", "exists", "exists_one", "map", "filter"})
STRING_SCANS = frozenset({"matches", "find", "findAll", "contains", "lowerAscii", "upperAscii", "split", "replace"})
PREFIX_CHECKS = frozenset({"startsWith", "endsWith"})
LIST_WALKS = frozenset({"isSorted", "sum", "min", "max", "indexOf", "lastIndexOf", "in"})

_TOKEN = re.compile(
    r"""\s*(?:
        (?P<str>[rR]?(?:'(?:\\.|[^'\\])*'|"(?:\\.|[^"\\])*"))
      | (?P<num>\d+(?:\.\d+)?(?:[eE][+-]?\d+)?[uU]?)
      | (?P<id>[A-Za-z_][A-Za-z0-9_]*)
      | (?P<op>&&|\|\||==|!=|<=|>=|[-+*/%<>!?:.,()\[\]{}])
    )""",
    re.VERBOSE,
)


@dataclasses.dataclass(frozen=True)
class Shape:
    """What the cost depends on: ``terms`` of (constant, list exponent, string
    factor) so that cost = sum(c * L**e * (S/10 if string else 1))."""

    terms: tuple[tuple[int, int, bool], ...]

    def cost(self, list_bound: int, string_bound: int) -> int:
        total = 0
        for const, exp, scans in self.terms:
            if scans:
                # The strings of the elements a comprehension ranges over share one body:
                # one list factor is inside the string bound.
                part = const * (max(list_bound, 1) ** max(exp - 1, 0)) * max(1, math.ceil(string_bound * 0.1))
            else:
                part = const * (max(list_bound, 1) ** exp)
            total += part
        return total

    @property
    def size_dependent(self) -> bool:
        return any(exp or scans for _, exp, scans in self.terms)


# Punctuation and literals cost nothing of their own; names (variables, selections,
# calls) and operators cost 1 each, as upstream's per-node costs.
_FREE = frozenset(".,()[]{}:")


def tokens(expression: str) -> list[tuple[str, str]]:
    out = []
    pos = 0
    text = expression.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            out.append(("op", text[pos]))  # an odd character: the engine reports it; it costs 1 here
            pos += 1
            continue
        kind = m.lastgroup or "op"
        out.append((kind, m.group(kind)))
        pos = m.end()
    return out


def _literal_list_size(toks: list[tuple[str, str]], close: int) -> int | None:
    """The element count of the list literal ending at ``toks[close]`` (a ``]``)."""
    depth = 0
    count = 1
    for i in range(close, -1, -1):
        t = toks[i][1]
        if t in ")]}":
            depth += 1
        elif t in "([{":
            depth -= 1
            if depth == 0:
                if t != "[" or (i > 0 and (toks[i - 1][0] in ("id", "str", "num") or toks[i - 1][1] in ")]")):
                    return None  # an index, not a literal
                return 0 if close == i + 1 else count
        elif t == "," and depth == 1:
            count += 1
    return None


def shape(expression: str) -> Shape:
    toks = tokens(expression)
    # Each open parenthesis: (list exponent it adds, literal factor it adds).
    stack: list[tuple[int, int]] = []
    exp, factor = 0, 1
    terms: dict[tuple[int, bool], int] = {}

    def add(const: int, e: int, scans: bool) -> None:
        terms[(e, scans)] = terms.get((e, scans), 0) + const

    for i, (kind, text) in enumerate(toks):
        is_call = kind == "id" and i + 1 < len(toks) and toks[i + 1][1] == "("
        after_dot = i > 0 and toks[i - 1][1] == "."
        if text == "(":
            opener = toks[i - 1][1] if i > 0 else ""
            if i > 1 and toks[i - 2][1] == "." and opener in COMPREHENSIONS:
                size = _literal_list_size(toks, i - 3) if toks[i - 3][1] == "]" else None
                pushed = (0, size) if size is not None else (1, 1)
            else:
                pushed = (0, 1)
            stack.append(pushed)
            exp += pushed[0]
            factor *= max(pushed[1], 1)
            continue
        if text == ")":
            if stack:
                e, f = stack.pop()
                exp -= e
                factor //= max(f, 1)
            continue
        if is_call and after_dot and text in STRING_SCANS:
            pattern = toks[i + 2] if i + 2 < len(toks) else ("", "")
            length = len(pattern[1]) - 2 if pattern[0] == "str" else 1
            add(factor * max(1, length), exp, True)
            continue
        if is_call and after_dot and text in PREFIX_CHECKS:
            pattern = toks[i + 2] if i + 2 < len(toks) else ("", "")
            add(factor * max(1, math.ceil((len(pattern[1]) - 2) * 0.1)) if pattern[0] == "str" else factor, exp, False)
            continue
        if (is_call and after_dot and text in LIST_WALKS) or (kind == "id" and text == "in"):
            add(factor, exp + 1, False)
            continue
        if kind == "id" or (kind == "op" and text not in _FREE):
            add(factor, exp, False)
    return Shape(tuple((const, e, scans) for (e, scans), const in sorted(terms.items())))


def estimated_cost(expression: str) -> int:
    return shape(expression).cost(LIST_BOUND, STRING_BOUND)


def exceeds_message(cost: int, limit: int = ESTIMATED_COST_LIMIT) -> str:
    """Upstream's refusal of an expression whose estimated cost is over the limit."""
    factor = cost / limit
    shown = f"{factor:.1f}x" if factor < 100 else "more than 100x"
    return (
        f"estimated rule cost exceeds budget by factor of {shown} (try simplifying the rule, or adding "
        "maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)"
    )


ACTUAL_COST_EXCEEDED = "operation cancelled: actual cost limit exceeded"


def sizes(value: Any, limit_depth: int = 64) -> tuple[int, int]:
    """The largest list (or map) and string length in ``value``."""
    longest_list = longest_str = 0
    stack = [(value, 0)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, str):
            if len(v) > longest_str:
                longest_str = len(v)
        elif isinstance(v, dict):
            if len(v) > longest_list:
                longest_list = len(v)
            if depth < limit_depth:
                stack.extend((x, depth + 1) for x in v.values() if isinstance(x, (dict, list, str)))
        elif isinstance(v, list):
            if len(v) > longest_list:
                longest_list = len(v)
            if depth < limit_depth:
                stack.extend((x, depth + 1) for x in v if isinstance(x, (dict, list, str)))
    return longest_list, longest_str
