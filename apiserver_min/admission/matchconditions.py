"""Match conditions: named boolean expressions that decide whether a validating
admission policy or an admission webhook applies to a request, shared by both.

They are evaluated as upstream evaluates them: a condition that is false means the
policy or webhook does not apply, whatever the others did; otherwise, when any of
them failed to evaluate, the errors (each ``expression '<text>' resulted in error:
<why>``, joined as upstream joins an aggregate of errors) are left to the caller's
failure policy; when all are true, it applies."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from .. import cel


@dataclasses.dataclass(frozen=True)
class Condition:
    name: str
    expression: str
    program: cel.Program | cel.CompileError


@dataclasses.dataclass(frozen=True)
class MatchResult:
    matches: bool
    errors: tuple[str, ...] = ()  # the evaluation errors, when no condition was false
    failed: str = ""  # the name of the condition that was false

    @property
    def error(self) -> str | None:
        """The errors as one message; None when there were none."""
        return join_errors(list(self.errors)) if self.errors else None


MATCHES = MatchResult(True)


def join_errors(messages: list[str]) -> str:
    """Several messages as one: the only one alone, else the distinct ones in brackets
    (upstream's aggregate error)."""
    distinct = list(dict.fromkeys(messages))
    if len(messages) == 1 or len(distinct) == 1:
        return distinct[0]
    return "[" + ", ".join(distinct) + "]"


def _compile(compiler: cel.Compiler, expression: Any) -> cel.Program | cel.CompileError:
    if not isinstance(expression, str):
        return cel.CompileError(str(expression), "expression must be a string")
    try:
        return compiler.compile(expression.strip())
    except cel.CompileError as exc:
        return exc


class MatchConditions:
    """A list of ``matchConditions`` compiled once with ``compiler`` (a condition that
    does not compile, which validation refuses on write, fails each evaluation)."""

    def __init__(self, conditions: Any, compiler: cel.Compiler):
        self.compiler = compiler
        self.conditions = [
            Condition(str(c.get("name") or ""), str(c.get("expression") or ""), _compile(compiler, c.get("expression")))
            for c in (conditions if isinstance(conditions, list) else [])
            if isinstance(c, dict)
        ]
        self.programs = [c.program for c in self.conditions if isinstance(c.program, cel.Program)]
        # What the conditions read, converted once per evaluation for all of them.
        self.paths = cel.merge_paths(self.programs)
        self.reads = frozenset(self.paths)

    def __bool__(self) -> bool:
        return bool(self.conditions)

    def __len__(self) -> int:
        return len(self.conditions)

    def evaluate(self, data: Mapping[str, Any]) -> MatchResult:
        """The outcome for the variables ``data`` (undeclared ones are ignored). The
        authorizer's checks use ``cel.CURRENT_AUTHORIZER``, which the caller sets."""
        if not self.conditions:
            return MATCHES
        activation = self.compiler.activation(data, self.paths)
        errors: list[str] = []
        for condition in self.conditions:
            program = condition.program
            if isinstance(program, cel.CompileError):
                errors.append(f"compilation failed: {program.detail}")
                continue
            try:
                result = program.run(activation)
            except cel.EvalError as exc:
                errors.append(f"expression '{condition.expression}' resulted in error: {exc}")
                continue
            if result is False:
                return MatchResult(False, failed=condition.name)
            if result is not True:
                # (upstream refuses such an expression on write; a dynamically typed one
                # that yields another type is an error here)
                errors.append(f"expression '{condition.expression}' resulted in error: must evaluate to bool")
        if errors:
            return MatchResult(False, tuple(errors))
        return MATCHES
