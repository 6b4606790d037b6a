"""The expression language (CEL) of validating admission policies and, later, of
custom resources' validation rules: compile with declared variables, a cache of
compiled programs, evaluation with an activation, the Kubernetes libraries
(``library.py``) and upstream's cost limits (``cost.py``).

The engine was chosen by measuring (``tests/bench/bench_cel.py``; 28 core
expressions plus 5 using the Kubernetes libraries where they were added; eval: p50 of
``object.spec.replicas <= 5`` on a 2 KB Deployment once compiled, the activation built
from the JSON object each time; a 2-core machine shared with other jobs, so the
figures moved by 2-4x between runs):

    engine                                  correct  eval p50      compile    functions
    cel-expr-python 0.1.3 (C++)             33/33    10-39 us      0.1-0.5 ms typed overloads, member calls
    common-expression-language 0.10 (Rust)  27/28    370-770 us    0.05-0.5 ms by name only, untyped
    cel-python 0.5 (pure Python)            26/28    930-1450 us   0.6-1.2 ms by name only

(The Rust engine lacks the strings extension: ``split``/``lowerAscii`` fail; cel-python
errs on ``null == null && ...``.) ``cel-expr-python`` (Google's C++ runtime) is the only
one within the 20 us target (at 10 us on a quiet machine) and the only one with typed
member overloads, which the libraries need (``list.sum()``, ``url(x).getHost()``,
``quantity(x).add(y)`` beside ``string.indexOf``). It reaches the target because each
program converts only the fields it reads (``engine.read_paths``): converting a whole
2 KB object costs several times the evaluation. Its bindings cannot declare opaque
types, so URLs, quantities and authorizer values are marked maps (see ``library``), and
it reports no cost, so the cost model is this project's own (see ``cost``).

This room depends only on ``apiserver_min.api``.
"""

from __future__ import annotations

from .cost import ACTUAL_COST_EXCEEDED, ESTIMATED_COST_LIMIT, PER_CALL_LIMIT
from .engine import Activation, CompileError, Compiler, EvalError, Program, TypeSpec, merge_paths, read_paths
from .library import CURRENT_AUTHORIZER, TYPE_KEY, authorizer_value

__all__ = [
    "Activation",
    "TypeSpec",
    "merge_paths",
    "read_paths",
    "ACTUAL_COST_EXCEEDED",
    "CURRENT_AUTHORIZER",
    "ESTIMATED_COST_LIMIT",
    "PER_CALL_LIMIT",
    "TYPE_KEY",
    "CompileError",
    "Compiler",
    "EvalError",
    "Program",
    "authorizer_value",
]
