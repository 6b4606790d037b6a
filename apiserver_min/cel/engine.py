"""Compiling and evaluating expressions on the chosen engine (``cel-expr-python``).

A :class:`Compiler` holds an environment: the declared variables (dynamically
typed by default: the objects are JSON documents; a caller may declare their types,
message types coming from protobuf descriptors it gives) and the Kubernetes libraries. ``compile``
checks an expression once and caches the program by its text; a program is then
evaluated any number of times with an activation (variable name -> JSON value).

The engine (a C++ library with its own protobuf runtime) is loaded with the first
compiler, not at import: most servers declare no policy, match condition or validation
rule, and never pay for it (see ``_engine``).
"""

from __future__ import annotations

import dataclasses
import re
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from . import cost, library
from .quick import QuickProgram, compile_quick

# The engine's bindings (``cel_expr_python.cel``), once ``_engine`` has loaded them: every
# program comes from a Compiler, which loads them first.
C: Any = None


def _engine() -> Any:
    """The engine's bindings, loaded on first use: the engine and RE2 add about 6 MiB
    resident (8 with the protobuf descriptor pools of typed variables) to a server that
    may never compile an expression."""
    global C
    if C is None:
        from cel_expr_python import cel  # the import system's lock makes this once

        C = cel
    return C


class CompileError(ValueError):
    """An expression that does not compile (syntax, undeclared names, types) or whose
    estimated cost is over the limit (``cost_exceeded``)."""

    def __init__(self, expression: str, detail: str, cost_exceeded: bool = False):
        super().__init__(detail)
        self.expression = expression
        self.detail = detail
        self.cost_exceeded = cost_exceeded


class EvalError(RuntimeError):
    """An evaluation that failed: no such key, overflow, division by zero, a library
    function's error, or the cost budget spent."""


_ENGINE_PREFIX = re.compile(r"^[A-Z_]+: ")
# The engine's wording of common evaluation errors, and upstream's.
_ERROR_WORDING = (
    (re.compile(r'^Key not found in map : "?(.*?)"?$'), r"no such key: \1"),
    (re.compile(r"^No matching overloads found : (.*)$"), r"no such overload: \1"),
    (re.compile(r"^divide by zero$"), "division by zero"),
    (re.compile(r"^modulus by zero$"), "modulus by zero"),
)


def _error_text(text: str) -> str:
    text = _ENGINE_PREFIX.sub("", text, count=1)
    for pattern, wording in _ERROR_WORDING:
        if pattern.match(text):
            return pattern.sub(wording, text)
    return text


def _compile_detail(exc: Exception) -> str:
    """The engine's message without its status code prefix and suffix, in upstream's
    shape: ``ERROR: <input>:1:8: Syntax error: ...`` followed by the marked source."""
    text = str(exc)
    text = _ENGINE_PREFIX.sub("", text, count=1)
    text = re.sub(r"\s*\[[A-Z_]+\]\s*$", "", text).rstrip()
    return re.sub(r"(undefined field '[^']*') not found in struct '[^']*'", r"\1", text)


# A declared type: ("int",), ("uint",), ("double",), ("string",), ("bool",), ("bytes",),
# ("dyn",), ("list", element), ("map", key, value), ("message", full name).
TypeSpec = tuple
# The scalar types, by the name of the engine's type constant.
_SCALARS = {
    "int": "INT",
    "uint": "UINT",
    "double": "DOUBLE",
    "string": "STRING",
    "bool": "BOOL",
    "bytes": "BYTES",
    "dyn": "DYN",
}


def _engine_type(spec: TypeSpec) -> Any:
    if spec[0] == "list":
        return C.Type.List(_engine_type(spec[1]))
    if spec[0] == "map":
        return C.Type.Map(_engine_type(spec[1]), _engine_type(spec[2]))
    if spec[0] == "message":
        return C.Type(spec[1])
    return getattr(C.Type, _SCALARS[spec[0]])


def _pool(descriptors: Iterable[bytes]) -> Any:
    """A descriptor pool with ``google.protobuf.Value`` (a JSON value, dynamically typed
    in expressions) and the given serialized file descriptors."""
    from google.protobuf.descriptor_pool import DescriptorPool
    from google.protobuf.struct_pb2 import DESCRIPTOR as STRUCT_FILE

    pool = DescriptorPool()
    pool.AddSerializedFile(STRUCT_FILE.serialized_pb)
    for data in descriptors:
        pool.AddSerializedFile(data)
    return pool


# The parts of a variable a program reads: field paths from the variable (an empty
# path: the whole value).
Paths = dict[str, frozenset[tuple[str, ...]]]


def _prune(value: Any, paths: frozenset[tuple[str, ...]]) -> Any:
    """``value`` with only the subtrees at ``paths`` (a path that is absent is left
    out, so ``has()`` and a missing key read as on the whole value)."""
    if () in paths or not isinstance(value, dict):
        return value
    out: dict[str, Any] = {}
    heads: dict[str, set[tuple[str, ...]]] = {}
    for path in paths:
        heads.setdefault(path[0], set()).add(path[1:])
    for key, rests in heads.items():
        if key in value:
            out[key] = _prune(value[key], frozenset(rests))
    return out


def merge_paths(programs: Iterable["Program"]) -> Paths:
    """The parts of the variables any of ``programs`` reads."""
    out: dict[str, set[tuple[str, ...]]] = {}
    for program in programs:
        for name, paths in program.paths.items():
            out.setdefault(name, set()).update(paths)
    return {name: frozenset(paths) for name, paths in out.items()}


class Activation:
    """The variables of one evaluation. Only the parts of them a program reads are
    converted for the engine (converting a whole 2 KB object costs several times the
    evaluation); the conversion is cached per set of parts. With ``paths`` (the parts
    a group of programs reads, ``merge_paths``) one conversion serves them all."""

    __slots__ = ("env", "data", "paths", "_converted")

    def __init__(self, env: Any, data: Mapping[str, Any], paths: Paths | None = None):
        self.env = env
        self.data = data
        self.paths = paths
        self._converted: dict[Any, tuple[Any, tuple[int, int] | None]] = {}

    def converted(self, program: "Program") -> tuple[Any, tuple[int, int]]:
        """The engine's activation of what ``program`` reads, and its largest list and
        string (the sizes its actual cost is bounded by)."""
        shared = self.paths is not None
        key = None if shared else program.paths_key
        found = self._converted.get(key)
        if found is None or (found[1] is None and program.size_dependent):
            paths = self.paths if self.paths is not None else program.paths
            pruned = {name: _prune(self.data[name], p) for name, p in paths.items() if name in self.data}
            found = (
                found[0] if found is not None else self.env.Activation(pruned),
                cost.sizes(list(pruned.values())) if program.size_dependent else None,
            )
            self._converted[key] = found
        return found[0], found[1] or (0, 0)


@dataclasses.dataclass
class Program:
    env: Any
    expression: str
    compiled: Any
    shape: cost.Shape
    estimated_cost: int
    paths: Paths
    # The expression's quick check, when it is made of the parts ``quick`` evaluates
    # (for untyped variables holding plain JSON values): see ``holds``.
    quick: QuickProgram | None = None

    def __post_init__(self) -> None:
        self.paths_key = tuple(sorted((k, tuple(sorted(v))) for k, v in self.paths.items()))
        self.size_dependent = self.shape.size_dependent

    @property
    def result_type(self) -> str:
        """The checked type of the result: ``bool``, ``string``, ``int``, ... or ``dyn``
        when it depends on untyped variables."""
        return str(self.compiled.return_type().name()).lower()

    @property
    def references(self) -> frozenset[str]:
        """The variables the expression reads."""
        return frozenset(self.paths)

    def run(self, activation: "Activation | Mapping[str, Any]") -> Any:
        """Evaluate with an activation (or a plain mapping of variable -> value); the
        plain Python result. Raises EvalError, also when the actual cost of this
        evaluation, bounded by the sizes of what it reads, is over the budget."""
        if not isinstance(activation, Activation):
            activation = Activation(self.env, activation)
        converted, sizes = activation.converted(self)
        if self.size_dependent and self.shape.cost(*sizes) > cost.PER_CALL_LIMIT:
            raise EvalError(cost.ACTUAL_COST_EXCEEDED)
        return self._eval(converted)

    def holds(self, data: Mapping[str, Any]) -> bool:
        """Whether the expression certainly evaluates to ``true`` on ``data`` (plain
        values, cut and cost-checked as for ``run_bounded``), answered without the
        engine when the quick check can tell: False means only "ask ``run``"."""
        return self.quick is not None and self.quick.holds(data)

    def run_bounded(self, data: Mapping[str, Any]) -> Any:
        """Evaluate with plain values already cut to what the program reads and whose
        cost the caller has already bounded (no pruning, no sizing, no per-call check
        here); as ``run`` otherwise."""
        return self._eval(self.env.Activation(data))

    def _eval(self, converted: Any) -> Any:
        value = self.compiled.eval(converted)
        if value.type() == C.Type.ERROR:
            raise EvalError(_error_text(str(value.value())))
        return _plain(value.value())


def _plain(v: Any) -> Any:
    """Values the engine hands back, as JSON-like Python values (timestamps and
    durations stay datetime objects)."""
    if isinstance(v, list):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if hasattr(v, "plain_value"):
        return _plain(v.plain_value())
    return v


def read_paths(expression: str, variables: Iterable[str]) -> Paths:
    """The field paths of each variable ``expression`` reads: every chain of field
    selections from the variable's name (``object.spec.replicas``); a chain followed
    by a call (``object.spec.x.size()``) stops before the function's name."""
    toks = cost.tokens(expression)
    names = set(variables)
    out: dict[str, set[tuple[str, ...]]] = {}
    for i, (kind, text) in enumerate(toks):
        if kind != "id" or text not in names or (i > 0 and toks[i - 1][1] == "."):
            continue
        path: list[str] = []
        j = i + 1
        while j + 1 < len(toks) and toks[j][1] == "." and toks[j + 1][0] == "id":
            if j + 2 < len(toks) and toks[j + 2][1] == "(":
                break  # a method call on the value selected so far
            path.append(toks[j + 1][1])
            j += 2
        out.setdefault(text, set()).add(tuple(path))
    return {name: frozenset(paths) for name, paths in out.items()}


class Compiler:
    """An environment with ``variables`` declared and the libraries; programs are cached
    by expression. Thread-safe for compile; evaluation holds no shared state."""

    def __init__(
        self,
        variables: Iterable[str],
        *,
        cost_limit: int = cost.ESTIMATED_COST_LIMIT,
        types: Mapping[str, TypeSpec] | None = None,
        descriptors: Iterable[bytes] = (),
    ):
        """``types``: declared types of some variables (the others are ``dyn``);
        ``descriptors``: serialized protobuf file descriptors of the message types they
        name. Raises ValueError when the descriptors or types do not fit together."""
        self.variables = tuple(variables)
        self.cost_limit = cost_limit
        types = types or {}
        # Declared types change what values mean (messages, uints): the quick check
        # reads only the untyped variables.
        self._typed = frozenset(types)
        engine = _engine()
        try:
            pool = _pool(descriptors) if types else None
            declared = {
                name: _engine_type(types[name]) if name in types else engine.Type.DYN for name in self.variables
            }
            self._env = engine.NewEnv(descriptor_pool=pool, variables=declared, functions=library.declarations(engine))
        except (TypeError, KeyError, RuntimeError) as exc:
            raise ValueError(f"cannot declare the variables' types: {exc}") from exc
        self._cache: dict[str, Program | CompileError] = {}
        self._lock = threading.Lock()

    def compile(self, expression: str) -> Program:
        """The program for ``expression``; CompileError (cached too) when it does not
        compile or costs too much."""
        found = self._cache.get(expression)
        if found is None:
            found = self._compile(expression)
            with self._lock:
                if len(self._cache) > 4096:
                    self._cache.clear()
                self._cache[expression] = found
        if isinstance(found, CompileError):
            raise found
        return found

    def _compile(self, expression: str) -> Program | CompileError:
        if not expression.strip():
            return CompileError(expression, "expression must not be empty")
        try:
            compiled = self._env.compile(expression)
        except RuntimeError as exc:
            return CompileError(expression, _compile_detail(exc))
        shape = cost.shape(expression)
        estimate = shape.cost(cost.LIST_BOUND, cost.STRING_BOUND)
        if estimate > self.cost_limit:
            return CompileError(expression, cost.exceeds_message(estimate, self.cost_limit), cost_exceeded=True)
        paths = read_paths(expression, self.variables)
        quick = compile_quick(expression, frozenset(self.variables) - self._typed)
        return Program(self._env, expression, compiled, shape, estimate, paths, quick)

    def activation(self, data: Mapping[str, Any], paths: Paths | None = None) -> Activation:
        """An activation for this compiler's programs (undeclared names are dropped);
        ``paths``: convert these parts once for every program run with it."""
        return Activation(self._env, {k: v for k, v in data.items() if k in self.variables}, paths)


__all__ = ["Activation", "CompileError", "Compiler", "EvalError", "Program", "TypeSpec", "merge_paths", "read_paths"]
