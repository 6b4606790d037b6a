"""The declared variables of each place expressions are written, and one compiler
(with its program cache) per environment."""

from __future__ import annotations

import functools

from .engine import Compiler

# A validating admission policy's variables (``params`` only with a ``paramKind``).
POLICY_VARIABLES = ("object", "oldObject", "request", "namespaceObject", "authorizer", "variables")


@functools.cache
def policy_compiler(with_params: bool) -> Compiler:
    """The compiler of policy expressions: ``params`` is declared only for a policy
    with a ``paramKind`` (elsewhere it is "undeclared reference to 'params'")."""
    return Compiler(POLICY_VARIABLES + (("params",) if with_params else ()))


# An admission webhook's ``matchConditions``: the request and its objects and the
# authorizer (``authorizer.requestResource`` is a field of the authorizer value); no
# parameters, no namespace object, no composited variables.
WEBHOOK_MATCH_VARIABLES = ("object", "oldObject", "request", "authorizer")


@functools.cache
def webhook_match_compiler() -> Compiler:
    """The compiler of webhooks' match conditions."""
    return Compiler(WEBHOOK_MATCH_VARIABLES)
