"""Validation rules of custom resources (``x-kubernetes-validations``): checked when
a definition is written (each rule compiles, returns a bool, and its estimated cost
fits the per-rule and per-definition limits) and evaluated on every write of an
object, after pruning, defaults and the schema's own checks.

A rule sees its node's value as ``self`` (objects as maps whose property names are
escaped as upstream: ``foo-bar`` reads ``self.foo__dash__bar``; numbers typed by the
schema) and, for a transition rule, the stored object's value at the same place as
``oldSelf``: such a rule runs only on an update that has an old value there (list
items are matched by their keys in a ``map`` list, never in other lists).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import re
from collections.abc import Iterator
from typing import Any

from ..api import validation as v
from ..cel import Activation, CompileError, Compiler, EvalError, Program, merge_paths
from ..cel import cost as celcost
from . import values

_log = logging.getLogger(__name__)

KEY = "x-kubernetes-validations"
VARIABLES = ("self", "oldSelf")
PER_CRD_LIMIT = 100 * celcost.ESTIMATED_COST_LIMIT  # upstream's StaticEstimatedCRDCostLimit
RUNTIME_BUDGET = 10 * celcost.PER_CALL_LIMIT  # upstream's RuntimeCELCostBudget, per object write
REASONS = ("FieldValueDuplicate", "FieldValueForbidden", "FieldValueInvalid", "FieldValueRequired")
MAX_MESSAGE_EXPRESSION_LENGTH = 5000
# How upstream names the root of an object in an error (a nil field path).
ROOT_PATH = "<nil>"
BUDGET_SPENT = "validation failed due to running out of cost budget, no further validation rules will be run"

_KEYWORDS = frozenset(
    "true false null in as break const continue else for function if import let loop package namespace return "
    "var void while".split()
)
_IDENT = re.compile(r"^[a-zA-Z_.\-/][a-zA-Z0-9_.\-/]*$")


@functools.lru_cache(maxsize=4096)
def escape(name: str) -> str | None:
    """A property name as rules read it (upstream's escaping); None when it cannot be read."""
    if name in _KEYWORDS:
        return f"__{name}__"
    if not _IDENT.match(name):
        return None
    return (
        name.replace("__", "__underscores__").replace(".", "__dot__").replace("-", "__dash__").replace("/", "__slash__")
    )


@functools.cache
def compiler() -> Compiler:
    # Costs are checked here against the schema's bounds, not the engine's request bounds.
    return Compiler(VARIABLES, cost_limit=10**30)


# --- size bounds ----------------------------------------------------------------------------

_MIN_SIZE = {"string": 2, "integer": 1, "number": 1, "boolean": 4, "object": 2, "array": 2}


def _max_elements(node: dict, key: str, element: Any) -> int:
    if isinstance(node.get(key), int):
        return int(node[key])
    typ = element.get("type", "") if isinstance(element, dict) else ""
    return celcost.MAX_REQUEST_BYTES // (_MIN_SIZE.get(typ, 1) + 1)


def bounds(node: Any) -> tuple[int, int]:
    """The largest list (or map) and the longest string under ``node`` (the sizes a
    rule's estimated cost is worked out with)."""
    if not isinstance(node, dict):
        return 0, 0
    typ = node.get("type", "")
    longest_list = longest_str = 0
    if typ == "string" or node.get(values.INT_OR_STRING) or not typ:
        longest_str = int(node["maxLength"]) if isinstance(node.get("maxLength"), int) else celcost.STRING_BOUND
    if typ == "array":
        longest_list = _max_elements(node, "maxItems", node.get("items"))
    addl = node.get("additionalProperties")
    if typ == "object" and (isinstance(addl, dict) or node.get(values.PRESERVE)):
        longest_list = _max_elements(node, "maxProperties", addl)
    if typ == "object" and isinstance(node.get("properties"), dict):
        longest_list = max(longest_list, len(node["properties"]))
    if not typ and node.get(values.PRESERVE):
        longest_list = celcost.LIST_BOUND
    children = list((node.get("properties") or {}).values()) if isinstance(node.get("properties"), dict) else []
    children += [c for c in (node.get("items"), addl) if isinstance(c, dict)]
    for child in children:
        lst, s = bounds(child)
        longest_list, longest_str = max(longest_list, lst), max(longest_str, s)
    return longest_list, longest_str


# --- checks when a definition is written ---------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Rule:
    rule: str
    program: Program
    message: str
    message_program: Program | None
    reason: str
    field_path: tuple[str, ...]
    transition: bool

    def error_text(self) -> str:
        return self.message.strip() if self.message else self.rule.strip()

    def default_message(self) -> str:
        return self.message.strip() if self.message else f"failed rule: {self.rule.strip()}"


_STEP = re.compile(r"\.([a-zA-Z_][a-zA-Z0-9_\-]*)|\['((?:[^'\\]|\\.)*)'\]")


def parse_field_path(text: str, node: dict) -> tuple[str, ...] | None:
    """A rule's ``fieldPath`` (``.spec.x``, ``['a.b']``) as property names; None unless
    every step names a property the schema declares (or a map key)."""
    steps: list[str] = []
    pos = 0
    cur: Any = node
    while pos < len(text):
        m = _STEP.match(text, pos)
        if m is None:
            return None
        name = m.group(1) if m.group(1) is not None else m.group(2).replace("\\'", "'")
        props = cur.get("properties") if isinstance(cur, dict) else None
        addl = cur.get("additionalProperties") if isinstance(cur, dict) else None
        if isinstance(props, dict) and name in props:
            cur = props[name]
        elif isinstance(addl, dict):
            cur = addl
        else:
            return None
        steps.append(name)
        pos = m.end()
    return tuple(steps) if steps else None


@functools.lru_cache(maxsize=256)
def _typed_compiler(node_json: str, root: bool) -> Compiler | None:
    """A compiler with ``self`` and ``oldSelf`` typed by the schema node (given as its
    canonical JSON); None when the node's types cannot be declared (the rule is then
    checked untyped, as before, and still type-checked on evaluation)."""
    from . import celtypes  # protobuf descriptors: loaded by the first rule a schema carries

    spec, descriptor, probe = celtypes.declare(json.loads(node_json), escape, root)
    if spec == ("dyn",):
        return None
    try:
        typed = Compiler(VARIABLES, cost_limit=10**30, types={"self": spec, "oldSelf": spec}, descriptors=[descriptor])
        if probe is not None:
            typed.compile(probe)
    except (ValueError, CompileError) as exc:
        _log.warning("validation rules: schema types not declared, rules checked untyped: %s", exc)
        return None
    return typed


def _typed_check(text: str, node: dict, root: bool) -> Program | None:
    """The rule compiled with ``self`` typed by its schema node: CompileError when it
    misuses a type; None when the node's types are left open."""
    typed = _typed_compiler(json.dumps(_structural(node), sort_keys=True, default=str), root)
    return typed.compile(text) if typed is not None else None


def _structural(node: Any) -> Any:
    """The parts of a schema node that make its type (its rules, junctors and value
    restrictions aside), so nodes of the same shape share a compiler."""
    if not isinstance(node, dict):
        return node
    keep = ("type", "format", "properties", "items", "additionalProperties")
    out = {k: node[k] for k in keep if k in node}
    out.update({k: True for k in (values.INT_OR_STRING, values.PRESERVE, values.EMBEDDED, "nullable") if node.get(k)})
    if isinstance(out.get("properties"), dict):
        out["properties"] = {k: _structural(sub) for k, sub in out["properties"].items()}
    for key in ("items", "additionalProperties"):
        if isinstance(out.get(key), dict):
            out[key] = _structural(out[key])
    return out


def _compile_rule(
    item: Any, node: dict, path: str, errs: list[v.FieldError], typed: bool = False, root: bool = False
) -> tuple[Rule | None, int]:
    if not isinstance(item, dict):
        errs.append(v.FieldError.type_invalid(path, item, "must be an object"))
        return None, 0
    text = item.get("rule")
    if not isinstance(text, str) or not text.strip():
        errs.append(v.FieldError.required(f"{path}.rule", ""))
        return None, 0
    before = len(errs)
    message = item.get("message") or ""
    if not isinstance(message, str) or "\n" in message or "\r" in message:
        errs.append(v.FieldError.invalid(f"{path}.message", message, "message must not contain line breaks"))
    elif message and not message.strip():
        errs.append(v.FieldError.required(f"{path}.message", "message must be non-empty if specified"))
    reason = item.get("reason") or v.FIELD_VALUE_INVALID
    if reason not in REASONS:
        errs.append(v.FieldError.not_supported(f"{path}.reason", reason, REASONS))
    field_path: tuple[str, ...] = ()
    if item.get("fieldPath"):
        parsed = parse_field_path(str(item["fieldPath"]), node)
        if parsed is None:
            errs.append(v.FieldError.invalid(f"{path}.fieldPath", item["fieldPath"], "fieldPath must be a valid path"))
        else:
            field_path = parsed
    try:
        program = compiler().compile(text)
        checked = _typed_check(text, node, root) if typed else None
    except CompileError as exc:
        errs.append(v.FieldError.invalid(f"{path}.rule", text, f"compilation failed: {exc.detail}"))
        return None, 0
    if (checked or program).result_type not in ("bool", "dyn"):
        errs.append(v.FieldError.invalid(f"{path}.rule", text, "cel expression must evaluate to a bool"))
    list_bound, string_bound = bounds(node)
    estimate = program.shape.cost(list_bound, string_bound)
    if estimate > celcost.ESTIMATED_COST_LIMIT:
        errs.append(v.FieldError.forbidden(f"{path}.rule", celcost.exceeds_message(estimate)))
    message_program = None
    expr = item.get("messageExpression")
    if expr:
        if not isinstance(expr, str) or not expr.strip():
            errs.append(v.FieldError.required(f"{path}.messageExpression", "must be non-empty if specified"))
        else:
            try:
                message_program = compiler().compile(expr)
            except CompileError as exc:
                errs.append(
                    v.FieldError.invalid(
                        f"{path}.messageExpression", expr, f"messageExpression compilation failed: {exc.detail}"
                    )
                )
            else:
                if message_program.result_type not in ("string", "dyn"):
                    errs.append(
                        v.FieldError.invalid(
                            f"{path}.messageExpression", expr, "messageExpression must evaluate to a string"
                        )
                    )
                msg_cost = message_program.shape.cost(list_bound, string_bound)
                if msg_cost > celcost.ESTIMATED_COST_LIMIT:
                    errs.append(
                        v.FieldError.forbidden(
                            f"{path}.messageExpression",
                            celcost.exceeds_message(msg_cost).replace(
                                "estimated rule cost", "estimated messageExpression cost"
                            ),
                        )
                    )
                estimate += msg_cost
    if len(errs) > before:
        return None, estimate
    transition = "oldSelf" in program.references
    return Rule(text, program, message, message_program, reason, field_path, transition), estimate


def _walk(node: Any, path: str, cardinality: int) -> Iterator[tuple[dict, str, int]]:
    """Every schema node with its definition path and how many values it may have in
    one object (the product of its enclosing lists' and maps' sizes)."""
    if not isinstance(node, dict):
        return
    yield node, path, cardinality
    props = node.get("properties")
    if isinstance(props, dict):
        for name, sub in props.items():
            yield from _walk(sub, f"{path}.properties[{name}]", cardinality)
    items = node.get("items")
    if isinstance(items, dict):
        yield from _walk(items, f"{path}.items", cardinality * _max_elements(node, "maxItems", items))
    addl = node.get("additionalProperties")
    if isinstance(addl, dict):
        yield from _walk(addl, f"{path}.additionalProperties", cardinality * _max_elements(node, "maxProperties", addl))


def has_rules(schema: Any) -> bool:
    """Whether any node of ``schema`` declares validation rules."""
    return any(node.get(KEY) for node, _, _ in _walk(schema, "", 1))


def stored_rules(crd: Any) -> frozenset[str]:
    """The text of every rule the stored definition ``crd`` holds, in any version."""
    found: set[str] = set()
    spec = crd.get("spec") if isinstance(crd, dict) else None
    for ver in (spec.get("versions") or ()) if isinstance(spec, dict) else ():
        schema = (ver.get("schema") or {}).get("openAPIV3Schema") if isinstance(ver, dict) else None
        if not isinstance(schema, dict) or not isinstance(ver.get("schema"), dict):
            continue
        for node, _, _ in _walk(schema, "", 1):
            items = node.get(KEY)
            for item in items if isinstance(items, list) else ():
                if isinstance(item, dict) and isinstance(item.get("rule"), str):
                    found.add(item["rule"])
    return frozenset(found)


def validate_schema_rules(schema: Any, path: str, stored: frozenset[str] = frozenset()) -> list[v.FieldError]:
    """Every reason the rules of ``schema`` (at ``path``) cannot be served. A rule whose
    text the stored definition already holds (``stored``, on an update) is checked as
    when it was written: it is not type-checked against its schema node, a check newer
    than the definitions stored before it (as upstream checks the rules a definition
    already had with the widest environment); its other checks, cost included, stay."""
    errs: list[v.FieldError] = []
    total = 0
    for node, node_path, cardinality in _walk(schema, path, 1):
        items = node.get(KEY)
        if items is None:
            continue
        if not isinstance(items, list):
            errs.append(v.FieldError.type_invalid(f"{node_path}.{KEY}", items, "must be a list"))
            continue
        if items and not (node.get("type") or node.get(values.INT_OR_STRING) or node.get(values.PRESERVE)):
            errs.append(v.FieldError.required(f"{node_path}.type", "must not be empty for rules"))
        for i, item in enumerate(items):
            typed = not (isinstance(item, dict) and item.get("rule") in stored)
            _, estimate = _compile_rule(item, node, f"{node_path}.{KEY}[{i}]", errs, typed=typed, root=node is schema)
            total += estimate * cardinality
    if total > PER_CRD_LIMIT:
        message = celcost.exceeds_message(total, PER_CRD_LIMIT).replace(
            "estimated rule cost", f"{KEY} estimated rule cost total for entire OpenAPIv3 schema"
        )
        errs.append(v.FieldError.forbidden(path, message))
    return errs


# --- evaluation ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _NodeRules:
    """The rules of one schema node, and what running them needs: the parts of
    ``self``/``oldSelf`` any of them (or their message expressions) reads, converted
    once per value for all of them, and whether any cost depends on sizes."""

    rules: tuple[Rule, ...]
    paths: dict[str, frozenset[tuple[str, ...]]]
    size_dependent: bool


class Validator:
    """The compiled rules of one schema (built once per definition version)."""

    def __init__(self, schema: dict):
        self.schema = schema
        self._rules: dict[int, _NodeRules] = {}
        for node, _, _ in _walk(schema, "", 1):
            compiled = []
            for item in node.get(KEY) or ():
                rule, _ = _compile_rule(item, node, "", [])
                if rule is not None:
                    compiled.append(rule)
            if compiled:
                programs = [r.program for r in compiled] + [r.message_program for r in compiled if r.message_program]
                self._rules[id(node)] = _NodeRules(
                    tuple(compiled), merge_paths(programs), any(p.shape.size_dependent for p in programs)
                )
        # The nodes with rules at or below them: values under the others are not walked.
        self._reaches: set[int] = set()
        self._mark(schema)
        self.has_transition_rules = any(r.transition for found in self._rules.values() for r in found.rules)
        self._reads_old = any("oldSelf" in found.paths for found in self._rules.values())
        # Where every node with rules sits at a fixed place (reached through properties
        # alone): the steps to each, for the one-evaluation check (see _all_pass).
        self._fixed = _fixed_places(schema, self._rules)
        self._combined: dict[tuple[int, ...], Program | None] = {}
        self._combiner: Compiler | None = None

    def _mark(self, node: Any) -> bool:
        if not isinstance(node, dict):
            return False
        props = node.get("properties")
        children = list(props.values()) if isinstance(props, dict) else []
        children += [node.get("items"), node.get("additionalProperties")]
        below = [self._mark(child) for child in children]
        if id(node) in self._rules or any(below):
            self._reaches.add(id(node))
            return True
        return False

    @property
    def empty(self) -> bool:
        return not self._rules

    def validate(self, obj: Any, old: Any = None, path: str = "", root: bool = True) -> list[v.FieldError]:
        """The errors of ``obj`` (an object, or with ``root`` False the value of a
        field at ``path``); transition rules run where ``old`` has a value."""
        if self._fixed is not None and (old is None or not self._reads_old) and self._all_pass(obj, root):
            return []
        errs: list[v.FieldError] = []
        budget = [RUNTIME_BUDGET]
        self._node(obj, old, self.schema, path, errs, budget, root=root)
        return errs

    def _all_pass(self, obj: Any, root: bool) -> bool:
        """Whether every rule that would run on ``obj`` (no transition rule among them)
        holds, checked in one evaluation: the rules joined with ``&&``, each reading its
        node's value under a name of its own. Only True counts: a rule that fails,
        errs, or would spend the budget (or the per-call limit) makes this False, and
        the rules are then run one by one for their errors, as always. The costs are
        worked out on the values as converted, which may hold more than the parts the
        rules read: never less than the one-by-one costs, so what passes here passes
        there."""
        data: dict[str, Any] = {}
        present: list[int] = []
        spent = 0
        for i, (steps, node, found) in enumerate(self._fixed or ()):
            value = obj
            for step in steps:
                value = value.get(step) if isinstance(value, dict) else None
                if value is None:
                    break
            if value is None:
                continue
            converted = to_cel(value, node, root and not steps, found.paths.get("self"))
            sizes = celcost.sizes([converted]) if found.size_dependent else (0, 0)
            for rule in found.rules:
                if rule.transition:
                    continue  # no old value: not run
                if rule.program.size_dependent:
                    cost = rule.program.shape.cost(*sizes)
                    if cost > celcost.PER_CALL_LIMIT:
                        return False
                    spent += max(cost, 1)
                else:
                    spent += max(rule.program.shape.cost(0, 0), 1)
            data[_combined_name(i)] = converted
            present.append(i)
        if not present:
            return True
        if spent > RUNTIME_BUDGET:
            return False
        program = self._combined_program(tuple(present))
        if program is None:
            return False
        if program.holds(data):
            return True  # certainly true, answered without the engine
        try:
            # each value is cut to its rules' paths and every rule's cost was checked above
            return program.run_bounded(data) is True
        except EvalError:
            return False

    def _combined_program(self, present: tuple[int, ...]) -> Program | None:
        """The rules of the nodes ``present`` (indexes into the fixed places) as one
        expression (None: they cannot be joined); built once per set of nodes."""
        if present in self._combined:
            return self._combined[present]
        fixed = self._fixed or ()
        parts = []
        for i in present:
            for rule in fixed[i][2].rules:
                if not rule.transition:
                    renamed = _renamed_self(rule.rule, _combined_name(i))
                    if renamed is None:
                        return None
                    parts.append(f"({renamed})")
        program = None
        if parts and len(self._combined) < _COMBINED_LIMIT:
            if self._combiner is None:
                names = [_combined_name(i) for i in range(len(fixed))]
                self._combiner = Compiler(names, cost_limit=10**30)
            try:
                program = self._combiner.compile(" && ".join(parts))
            except CompileError:
                program = None
            self._combined[present] = program
        return program

    def _node(
        self,
        value: Any,
        old: Any,
        node: dict,
        path: str,
        errs: list[v.FieldError],
        budget: list[int],
        root: bool = False,
    ) -> None:
        if value is None or budget[0] < 0 or id(node) not in self._reaches:
            return
        found = self._rules.get(id(node))
        if found:
            self._run(found, value, old, node, path, errs, budget, root)
        reaches = self._reaches
        if isinstance(value, dict):
            props = node.get("properties")
            if isinstance(props, dict):
                for key, sub in props.items():
                    if id(sub) in reaches and key in value and not (root and key == "metadata"):
                        o = old.get(key) if isinstance(old, dict) else None
                        self._node(value[key], o, sub, f"{path}.{key}" if path else key, errs, budget)
            addl = node.get("additionalProperties")
            if id(addl) in reaches:
                for key, item in value.items():
                    o = old.get(key) if isinstance(old, dict) else None
                    self._node(item, o, addl, f"{path}[{key}]" if path else key, errs, budget)
        elif isinstance(value, list) and id(node.get("items")) in reaches:
            items = node["items"]
            olds = _correlate(value, old, node)
            for i, item in enumerate(value):
                self._node(item, olds[i], items, f"{path}[{i}]", errs, budget)

    def _run(
        self,
        found: _NodeRules,
        value: Any,
        old: Any,
        node: dict,
        path: str,
        errs: list[v.FieldError],
        budget: list[int],
        root: bool,
    ) -> None:
        kind = "" if node.get(values.INT_OR_STRING) else node.get("type", "")
        shown = path or ROOT_PATH
        data: dict[str, Any] = {"self": to_cel(value, node, root, found.paths.get("self"))}
        if old is not None:
            data["oldSelf"] = to_cel(old, node, root, found.paths.get("oldSelf"))
        # One conversion of what the node's rules read serves them all (with the sizes
        # of what they read, which bound the cost of those whose cost depends on sizes).
        activation = Activation(found.rules[0].program.env, data, found.paths)
        for rule in found.rules:
            if rule.transition and old is None:
                continue
            sizes = activation.converted(rule.program)[1] if rule.program.size_dependent else (0, 0)
            call_cost = rule.program.shape.cost(*sizes)
            budget[0] -= max(call_cost, 1)
            if budget[0] < 0:
                errs.append(v.FieldError.invalid(shown, kind, BUDGET_SPENT))
                return
            if call_cost <= celcost.PER_CALL_LIMIT and rule.program.holds(data):
                continue  # certainly true (the quick check reads what the engine would)
            try:
                result = rule.program.run(activation)
            except EvalError as exc:
                text = str(exc)
                if text.startswith(celcost.ACTUAL_COST_EXCEEDED):
                    errs.append(
                        v.FieldError.invalid(
                            shown,
                            kind,
                            f"'{text}': no further validation rules will be run due to call cost exceeds limit "
                            f"for rule: {rule.error_text()}",
                        )
                    )
                    budget[0] = -1
                    return
                if text.startswith("no such overload"):
                    detail = (
                        f"'{text}': call arguments did not match a supported operator, function or macro "
                        f"signature for rule: {rule.error_text()}"
                    )
                else:
                    detail = f"{text} evaluating rule: {rule.error_text()}"
                errs.append(v.FieldError.invalid(shown, kind, detail))
                continue
            if result is True:
                continue
            where = path
            for step in rule.field_path:
                where = f"{where}.{step}" if where else step
            message = rule.default_message()
            if rule.message_program is not None:
                try:
                    text = rule.message_program.run(activation)
                except EvalError:
                    text = None
                if isinstance(text, str) and text.strip() and "\n" not in text and len(text) <= 5000:
                    message = text
            errs.append(_error(rule.reason, where or ROOT_PATH, kind, message))


_COMBINED_LIMIT = 64  # sets of present nodes whose joined rules a validator keeps
_COMBINED_PREFIX = "rule_self_"
# A rule's lexemes: string literals (raw, bytes, triple-quoted), identifiers, anything else.
_LEXEME = re.compile(
    r"""[rRbB]{0,2}(?:'''.*?'''|\"\"\".*?\"\"\"|'(?:\\.|[^'\\\n])*'|"(?:\\.|[^"\\\n])*")"""
    r"|[A-Za-z_][A-Za-z0-9_]*|\s+|.",
    re.S,
)


def _combined_name(i: int) -> str:
    return f"{_COMBINED_PREFIX}{i}"


def _renamed_self(text: str, name: str) -> str | None:
    """``text`` reading ``name`` where it reads ``self`` (the variable, not a field
    selected as ``.self`` nor anything inside a string); None when it might already
    use a name of the joined rules."""
    if _COMBINED_PREFIX in text:
        return None
    out: list[str] = []
    previous = ""
    for m in _LEXEME.finditer(text):
        lexeme = m.group()
        if lexeme == "self" and previous != ".":
            lexeme = name
        if not lexeme.isspace():
            previous = lexeme
        out.append(lexeme)
    return "".join(out)


def _fixed_places(
    schema: dict, found: dict[int, _NodeRules]
) -> tuple[tuple[tuple[str, ...], dict, _NodeRules], ...] | None:
    """The steps (property names from the root) to every node with rules, when all
    of them are reached through properties alone (not under a list's items or a
    map's values, and not under the root's metadata, which rules never see); None
    otherwise."""
    out: list[tuple[tuple[str, ...], dict, _NodeRules]] = []

    def visit(node: Any, steps: tuple[str, ...]) -> None:
        if not isinstance(node, dict):
            return
        if id(node) in found:
            out.append((steps, node, found[id(node)]))
        props = node.get("properties")
        for key, sub in props.items() if isinstance(props, dict) else ():
            if not (not steps and key == "metadata"):
                visit(sub, (*steps, key))

    visit(schema, ())
    return tuple(out) if len(out) == len(found) else None


def _error(reason: str, path: str, kind: str, message: str) -> v.FieldError:
    if reason == v.FIELD_VALUE_FORBIDDEN:
        return v.FieldError.forbidden(path, message)
    if reason == v.FIELD_VALUE_REQUIRED:
        return v.FieldError.required(path, message)
    if reason == v.FIELD_VALUE_DUPLICATE:
        return v.FieldError.duplicate(path, kind)
    return v.FieldError.invalid(path, kind, message)


def _correlate(value: list, old: Any, node: dict) -> list[Any]:
    """The old item of each new item: only a ``map`` list's items have one (by keys)."""
    if not isinstance(old, list) or node.get(values.LIST_TYPE) != "map":
        return [None] * len(value)
    keys = node.get(values.LIST_MAP_KEYS) or []
    by_key = {}
    for item in old:
        if isinstance(item, dict):
            by_key[tuple(repr(item.get(k)) for k in keys)] = item
    return [by_key.get(tuple(repr(item.get(k)) for k in keys)) if isinstance(item, dict) else None for item in value]


def to_cel(value: Any, node: Any, root: bool = False, paths: frozenset[tuple[str, ...]] | None = None) -> Any:
    """``value`` as rules see it: property names escaped, numbers typed by the schema,
    and the metadata of the root and of embedded resources limited to name and
    generateName. With ``paths`` (field paths as rules name them, ``read_paths``) only
    the parts of an object at those paths are converted (what the rules read)."""
    if not isinstance(node, dict) or node.get(values.INT_OR_STRING):
        return value
    typ = node.get("type", "")
    if typ == "number" and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if typ == "integer" and isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        items = node.get("items")
        return [to_cel(x, items) for x in value]
    if isinstance(value, dict):
        props = node.get("properties")
        addl = node.get("additionalProperties")
        embedded = root or node.get(values.EMBEDDED)
        wanted: dict[str, set[tuple[str, ...]]] | None = None
        if paths is not None and () not in paths:
            wanted = {}
            for p in paths:
                wanted.setdefault(p[0], set()).add(p[1:])
        out: dict[str, Any] = {}
        if wanted is not None and not embedded and isinstance(props, dict):
            if all(name in props and escape(name) == name for name in wanted):
                # Declared properties read under their own names: only those are looked at.
                for name, rest in wanted.items():
                    if name in value:
                        out[name] = to_cel(value[name], props[name], False, frozenset(rest))
                return out
        for key, item in value.items():
            if embedded and key == "metadata" and isinstance(item, dict):
                if wanted is None or key in wanted:
                    out[key] = {k: item[k] for k in ("name", "generateName") if k in item}
                continue
            if isinstance(props, dict) and key in props:
                name = escape(key)
                if name is not None and (wanted is None or name in wanted):
                    rest = frozenset(wanted[name]) if wanted is not None else None
                    out[name] = to_cel(item, props[key], False, rest)
            elif isinstance(addl, dict):
                if wanted is None or key in wanted:
                    out[key] = to_cel(item, addl, False, frozenset(wanted[key]) if wanted is not None else None)
            elif wanted is None or key in wanted:
                out[key] = item  # kept unknown fields, or apiVersion and kind
        return out
    return value


def has_blocking_errors(errs: list[v.FieldError]) -> bool:
    """Whether the schema's errors leave the object in a shape rules cannot be run on
    (wrong types, too long, too many): upstream skips the rules then."""
    blocking = (v.FIELD_VALUE_NOT_SUPPORTED, v.FIELD_VALUE_TOO_LONG, v.FIELD_VALUE_TOO_MANY, v.FIELD_VALUE_TYPE_INVALID)
    return any(e.type in blocking or _WRONG_TYPE.search(e.detail) for e in errs)


# A value of the wrong JSON type (a string of the wrong format is no such error).
_WRONG_TYPE = re.compile(r" must be of type (?:array|boolean|integer|number|object|string|integer-or-string): ")


NOT_CHECKED = "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation"
