"""A policy compiled for one generation, and its evaluation for one request and one
binding (and one parameter object).

Evaluation, as upstream: the match conditions (all true, or the policy does not
apply), the variables (in order; each may read those before it), the validations
(each false one is a failure with its message and reason), the audit annotations.
An expression that fails to evaluate is a failure under ``failurePolicy: Fail`` and
is skipped under ``Ignore``."""

from __future__ import annotations

import dataclasses
from typing import Any

from ... import cel
from ...cel import environments
from ..matchconditions import MatchConditions
from .matching import Matcher

REASON_CODES = {"Unauthorized": 401, "Forbidden": 403, "Invalid": 422, "RequestEntityTooLarge": 413}


@dataclasses.dataclass
class Failure:
    """A validation that failed (or an error counted as one): what the binding's
    actions report."""

    message: str
    reason: str = "Invalid"
    index: int | None = None  # the validation's index; None for errors outside one


@dataclasses.dataclass
class Outcome:
    failures: list[Failure] = dataclasses.field(default_factory=list)
    annotations: dict[str, str] = dataclasses.field(default_factory=dict)
    matched: bool = True  # False when a match condition is false


def _compile(compiler: cel.Compiler, expression: Any) -> cel.Program | cel.CompileError:
    if not isinstance(expression, str):
        return cel.CompileError(str(expression), "expression must be a string")
    try:
        return compiler.compile(expression)
    except cel.CompileError as exc:
        return exc


class CompiledPolicy:
    """A policy's programs, for one generation."""

    def __init__(self, policy: dict):
        md = policy.get("metadata") or {}
        spec = policy.get("spec") or {}
        self.name: str = md.get("name") or ""
        self.uid: str = md.get("uid") or ""
        self.generation = md.get("generation")
        self.spec = spec
        self.failure_policy = spec.get("failurePolicy") or "Fail"
        param_kind = spec.get("paramKind")
        self.param_kind: tuple[str, str] | None = (
            (param_kind.get("apiVersion") or "", param_kind.get("kind") or "") if isinstance(param_kind, dict) else None
        )
        compiler = environments.policy_compiler(self.param_kind is not None)
        self.match_conditions = MatchConditions(spec.get("matchConditions"), compiler)
        self.variables = [
            (x.get("name") or "", x.get("expression"), _compile(compiler, x.get("expression")))
            for x in spec.get("variables") or []
            if isinstance(x, dict)
        ]
        self.validations = [
            (
                x,
                _compile(compiler, x.get("expression")),
                _compile(compiler, x["messageExpression"]) if x.get("messageExpression") else None,
            )
            for x in spec.get("validations") or []
            if isinstance(x, dict)
        ]
        self.audits = [
            (x.get("key") or "", x.get("valueExpression"), _compile(compiler, x.get("valueExpression")))
            for x in spec.get("auditAnnotations") or []
            if isinstance(x, dict)
        ]
        self.matcher = Matcher(spec.get("matchConstraints"))
        programs = [q for _, p, m in self.validations for q in (p, m) if isinstance(q, cel.Program)]
        programs += [p for _, _, p in self.audits if isinstance(p, cel.Program)]
        # What the validations and audit annotations read, converted once per evaluation.
        self.final_paths = cel.merge_paths(programs)
        every = programs + self.match_conditions.programs
        every += [p for _, _, p in self.variables if isinstance(p, cel.Program)]
        # The variables any expression reads: the others need not be computed.
        self.reads = frozenset(name for p in every for name in p.paths)

    # --- evaluation --------------------------------------------------------------------

    def _run(
        self, program: cel.Program | cel.CompileError, data: dict | cel.Activation, variables: dict[str, Any]
    ) -> Any:
        """The program's result on ``data``; EvalError when it fails, also when a
        variable it reads failed."""
        if isinstance(program, cel.CompileError):
            raise cel.EvalError(f"compilation error: {program.detail}")
        for path in program.paths.get("variables", ()):
            if path and isinstance(variables.get(path[0]), _VariableError):
                raise cel.EvalError(variables[path[0]].message)
        return program.run(data)

    def evaluate(self, data: dict) -> Outcome:
        """Evaluate against ``data`` (object, oldObject, request, params,
        namespaceObject, authorizer); the failures (errors already turned into failures
        or dropped by the failure policy) and the audit annotations."""
        out = Outcome()
        fail = self.failure_policy == "Fail"
        variables: dict[str, Any] = {}
        data = dict(data, variables=variables)

        matched = self.match_conditions.evaluate(data)
        if matched.error is not None:
            if fail:
                out.failures.append(Failure(matched.error))
            return out
        if not matched.matches:
            out.matched = False
            return out

        for name, _expression, program in self.variables:
            clean = {k: v for k, v in variables.items() if not isinstance(v, _VariableError)}
            try:
                variables[name] = self._run(program, dict(data, variables=clean), variables)
            except cel.EvalError as exc:
                variables[name] = _VariableError(f'composited variable "{name}" fails to evaluate: {exc}')
        # The variables as the validations see them: failed ones are absent (reading one
        # is the variable's error, raised by _run).
        final = dict(data, variables={k: v for k, v in variables.items() if not isinstance(v, _VariableError)})
        activation = environments.policy_compiler(self.param_kind is not None).activation(final, self.final_paths)

        for index, (spec, program, message_program) in enumerate(self.validations):
            expression = spec.get("expression")
            try:
                result = self._run(program, activation, variables)
            except cel.EvalError as exc:
                if fail:
                    out.failures.append(Failure(f"expression '{expression}' resulted in error: {exc}", index=index))
                continue
            if result is True:
                continue
            if result is not False:
                if fail:
                    out.failures.append(
                        Failure(
                            f"expression '{expression}' resulted in error: value {result!r} is not a bool", index=index
                        )
                    )
                continue
            out.failures.append(
                Failure(
                    self._message(spec, message_program, activation, variables), spec.get("reason") or "Invalid", index
                )
            )

        for key, expression, program in self.audits:
            try:
                value = self._run(program, activation, variables)
            except cel.EvalError as exc:
                if fail:
                    out.failures.append(Failure(f"expression '{expression}' resulted in error: {exc}"))
                continue
            if value is None:
                continue
            if not isinstance(value, str):
                if fail:
                    out.failures.append(
                        Failure(
                            f"valueExpression '{expression}' resulted in an unsupported type: must be string or null"
                        )
                    )
                continue
            out.annotations[f"{self.name}/{key}"] = value
        return out

    def _message(
        self, spec: dict, program: cel.Program | cel.CompileError | None, activation: Any, variables: dict
    ) -> str:
        message = spec.get("message") or ""
        if program is not None:
            try:
                value = self._run(program, activation, variables)
            except cel.EvalError:
                value = None
            if isinstance(value, str) and value.strip() and "\n" not in value:
                return value
        return message or f"failed expression: {spec.get('expression')}"


@dataclasses.dataclass
class _VariableError:
    message: str
