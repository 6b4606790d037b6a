"""The expression language (CEL) of validating admission policies and, later, of
custom resources' validation rules: compile with declared variables, a cache of
compiled programs, evaluation with an activation, the Kubernetes libraries
(``library.py``) and upstream's cost limits (``cost.py``).

The engine was chosen by measuring (``tests/bench/bench_cel.py``; 2 KB Deployment,
p50 of ``object.spec.replicas <= 5`` once compiled, 28 core expressions plus 5 using
the Kubernetes libraries where the engine lets functions be added):

    engine                              correct  eval p50   compile   libraries
    cel-expr-python 0.1.3 (C++)         33/33     ~13 us     ~90 us   added (typed overloads, member functions)
    common-expression-language 0.10 (Rust) 27/28  ~770 us    ~43 us   global functions only (no member overloads)
    cel-python 0.5 (pure Python)        11/28    ~1300 us   ~480 us   not tried: too slow, wrong results

``cel-expr-python`` (Google's C++ runtime) is the only one within the 20 us target and
the only one with typed member overloads, which the libraries need (``list.sum()``,
``url(x).getHost()``, ``quantity(x).add(y)``). Its bindings cannot declare opaque
types, so URLs, quantities and authorizer values are marked maps (see ``library``),
and it reports no cost, so the cost model is this project's own (see ``cost``).

This room depends only on ``apiserver_min.api``.
"""

from __future__ import annotations

from .cost import ACTUAL_COST_EXCEEDED, ESTIMATED_COST_LIMIT, PER_CALL_LIMIT
from .engine import Activation, CompileError, Compiler, EvalError, Program, merge_paths, read_paths
from .library import CURRENT_AUTHORIZER, TYPE_KEY, authorizer_value

__all__ = [
    "Activation",
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
