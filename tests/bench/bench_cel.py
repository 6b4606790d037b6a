"""Chooses the CEL engine: correctness on Kubernetes-style expressions and the speed
of one compiled expression on a 2 KB Deployment, for each installed candidate; then
the cost of a validating admission policy on the write path: creates/s of 2 KB
ConfigMaps in a namespace one policy of three validations applies to, against a
namespace no policy applies to, on one orch-apiserver in the same run.

    PYTHONPATH=. .venv/bin/python tests/bench/bench_cel.py [--no-server]

Candidates: ``cel-expr-python`` (module ``cel_expr_python``, the C++ CEL runtime),
``common-expression-language`` (module ``cel``, Rust) and ``cel-python`` (module
``celpy``, pure Python). A candidate not installed is reported as such. The figures
are recorded in ``apiserver_min/cel/__init__.py``.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

DEPLOYMENT = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {
        "name": "web",
        "namespace": "default",
        "labels": {"app": "web", "tier": "front"},
        "annotations": {"note": "x" * 600},
    },
    "spec": {
        "replicas": 3,
        "selector": {"matchLabels": {"app": "web"}},
        "template": {
            "metadata": {"labels": {"app": "web"}},
            "spec": {
                "containers": [
                    {
                        "name": f"c{i}",
                        "image": f"registry.local/app{i}:1.{i}",
                        "ports": [{"containerPort": 8080 + i}],
                        "env": [{"name": f"K{j}", "value": "v" * 20} for j in range(6)],
                        "resources": {"limits": {"cpu": "500m", "memory": "128Mi"}},
                    }
                    for i in range(3)
                ]
            },
        },
    },
}

ERROR = object()  # the expected outcome "evaluation error"

# (expression, expected); `object` is DEPLOYMENT, `self` a list of 3 strings.
CORE = [
    ("object.spec.replicas <= 5", True),
    ("has(object.metadata.labels) && 'app' in object.metadata.labels", True),
    ("has(object.metadata.ownerReferences)", False),
    ("object.spec.template.spec.containers.all(c, c.image.startsWith('registry.local/'))", True),
    ("object.spec.template.spec.containers.exists(c, c.name == 'c1')", True),
    ("object.spec.template.spec.containers.exists_one(c, c.name.endsWith('1'))", True),
    ("object.spec.template.spec.containers.map(c, c.name) == ['c0', 'c1', 'c2']", True),
    ("object.spec.template.spec.containers.filter(c, c.name != 'c0').size()", 2),
    ("self.size() <= 10", True),
    ("'web'.contains('e') && 'Web'.lowerAscii() == 'web' && 'a-b'.split('-') == ['a', 'b']", True),
    ("object.metadata.name.matches('^[a-z]+$')", True),
    ("object.metadata.name.size() + 1", 4),
    ("9223372036854775807 + 1", ERROR),
    ("-9223372036854775808 - 1", ERROR),
    ("1 / 0", ERROR),
    ("5u - 6u", ERROR),
    ("2u * 3u == 6u", True),
    ("1.5 * 2.0", 3.0),
    ("int(2.9) == 2 && double(1) == 1.0", True),
    ("object.metadata.missing", ERROR),
    ("null == null && object.spec.replicas != null", True),
    ("timestamp('2023-01-01T00:00:00Z') + duration('1h') > timestamp('2023-01-01T00:30:00Z')", True),
    ("duration('90s') == duration('1m30s')", True),
    ("{'a': 1}.a + [1, 2][1]", 3),
    ("object.spec.replicas > 1 ? 'many' : 'one'", "many"),
    ("type(1) == int && type('x') == string", True),
    ("[1, 2, 3].all(x, x > 0) && ![1, 2].exists(x, x > 5)", True),
    ("'x' + 1", ERROR),  # no overload: a compile-time error where the engine checks types
]
# Kubernetes libraries, where the engine lets functions be added.
LIBRARIES = [
    ("[1, 2, 3].isSorted() && [1, 2, 3].sum() == 6 && [3, 1].min() == 1 && [3, 1].max() == 3", True),
    ("['a', 'b', 'a'].indexOf('a') == 0 && ['a', 'b', 'a'].lastIndexOf('a') == 2", True),
    ("'abc 123'.find('[0-9]+') == '123' && 'a1b2'.findAll('[0-9]') == ['1', '2']", True),
    ("url('https://example.com:80/a?b=c').getHost() == 'example.com:80' && isURL('https:/x') == true", True),
    ("quantity('1Gi').isGreaterThan(quantity('1G')) && quantity('500m').add(quantity('500m')) == quantity('1')", True),
]
SELF = ["a", "b", "c"]


def _outcome(value, expected) -> bool:
    if expected is ERROR:
        return value is ERROR
    return value is not ERROR and value == expected and type(value) is type(expected)


# --- the candidates ------------------------------------------------------------


def engine_cel_expr_python():
    from apiserver_min.cel import Compiler  # the chosen engine, with the libraries

    compiler = Compiler(("object", "self"))

    def compile_(expr):
        return compiler.compile(expr)

    def run(prog, data):
        return prog.run(compiler.activation(data))  # a fresh activation: the JSON converted each time

    return "cel-expr-python (C++)", compile_, run, True


def engine_rust():
    import cel  # type: ignore[import-not-found]

    def compile_(expr):
        return cel.compile(expr)

    def run(prog, data):
        return prog.execute(data)

    return "common-expression-language (Rust)", compile_, run, False


def engine_celpy():
    import celpy  # type: ignore[import-not-found]

    env = celpy.Environment()

    def compile_(expr):
        return env.program(env.compile(expr))

    def run(prog, data):
        result = prog.evaluate({k: celpy.json_to_cel(v) for k, v in data.items()})
        if isinstance(result, celpy.CELEvalError):
            raise ValueError(str(result))
        return _plain(result)

    return "cel-python (pure Python)", compile_, run, False


def _plain(v):
    if isinstance(v, bool) or type(v).__name__ == "BoolType":
        return bool(v)
    if isinstance(v, int):
        return int(v)
    if isinstance(v, float):
        return float(v)
    if isinstance(v, str):
        return str(v)
    if isinstance(v, list):
        return [_plain(x) for x in v]
    return v


def measure(factory):
    try:
        name, compile_, run, libs = factory()
    except ImportError as exc:
        return factory.__name__, None, f"not installed ({exc})"
    data = {"object": DEPLOYMENT, "self": SELF}
    passed = failed = 0
    failures = []
    cases = CORE + (LIBRARIES if libs else [])
    for expr, expected in cases:
        try:
            value = run(compile_(expr), data)
        except Exception:  # noqa: BLE001 - any failure to compile or evaluate is an error outcome here
            value = ERROR
        if _outcome(value, expected):
            passed += 1
        else:
            failed += 1
            failures.append(f"{expr!r} -> {'error' if value is ERROR else repr(value)}")
    prog = compile_("object.spec.replicas <= 5")
    samples = []
    for _ in range(30):
        n = 200
        t = time.perf_counter()
        for _ in range(n):
            run(prog, {"object": DEPLOYMENT})
        samples.append((time.perf_counter() - t) / n * 1e6)
    t = time.perf_counter()
    for i in range(20):  # a new expression each time: no engine's cache answers
        compile_(f"object.spec.template.spec.containers.all(c, c.image.startsWith('registry.local/')) && {i} >= 0")
    compile_us = (time.perf_counter() - t) / 20 * 1e6
    return name, (passed, failed, len(cases), statistics.median(samples), compile_us, libs), failures


# --- the write path: creates/s with and without a policy ------------------------------

POLICY_TARGET = 0.85  # creates/s with the policy, as a share of the baseline


async def _creates(server, namespace: str, count: int, concurrency: int = 16, offset: int = 0) -> float:
    import aiohttp

    body = {"metadata": {"name": ""}, "data": {f"k{i}": "v" * 90 for i in range(20)}}
    ctx = server.ssl_context()
    url = f"https://{server.host}:{server.port}/api/v1/namespaces/{namespace}/configmaps"
    names = iter(range(offset, offset + count))

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx, limit=concurrency)) as session:

        async def worker() -> None:
            for i in names:
                doc = dict(body, metadata={"name": f"cm-{i:06d}", "labels": {"app": "bench"}})
                async with session.post(url, json=doc) as resp:
                    if resp.status != 201:
                        raise RuntimeError(f"create: {resp.status} {await resp.text()}")

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return count / (time.perf_counter() - start)


def bench_policy_writes(count: int = 1500) -> None:
    import tempfile

    from apiserver_min.api import names as n
    from tests.apiserver_fixtures import ApiServerProcess

    group = n.ADMISSIONREGISTRATION_GROUP
    with tempfile.TemporaryDirectory(prefix="bench-cel-") as tmp, ApiServerProcess(Path(tmp) / "data") as server:
        for ns in ("plain", "governed", "warmup"):
            server.json("POST", "/api/v1/namespaces", {"metadata": {"name": ns, "labels": {"bench": ns}}}, expect=201)
        policy = {
            "metadata": {"name": "configmap-rules"},
            "spec": {
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE"],
                            "resources": ["configmaps"],
                        }
                    ],
                    "namespaceSelector": {"matchLabels": {"bench": "governed"}},
                },
                "validations": [
                    {"expression": "object.metadata.name.startsWith('cm-')"},
                    {"expression": "has(object.metadata.labels) && object.metadata.labels.app == 'bench'"},
                    {"expression": "object.data.size() <= 64"},
                ],
            },
        }
        binding = {
            "metadata": {"name": "configmap-rules"},
            "spec": {"policyName": "configmap-rules", "validationActions": ["Deny"]},
        }
        server.json("POST", f"/apis/{group}/v1/validatingadmissionpolicies", policy, expect=201)
        server.json("POST", f"/apis/{group}/v1/validatingadmissionpolicybindings", binding, expect=201)
        asyncio.run(_creates(server, "warmup", 300))
        # Alternate the two, so load from elsewhere on the machine falls on both alike.
        plain, governed = [], []
        for round_ in range(3):
            plain.append(asyncio.run(_creates(server, "plain", count // 3, 16, offset=round_ * count)))
            governed.append(asyncio.run(_creates(server, "governed", count // 3, 16, offset=round_ * count)))
        base, with_policy = statistics.median(plain), statistics.median(governed)
        status, doc = server.json("POST", "/api/v1/namespaces/governed/configmaps", {"metadata": {"name": "bad"}})
        assert status == 422, (status, doc)  # the policy did run
    share = with_policy / base
    print(f"creates/s, 2 KB ConfigMaps, 16 connections, median of 3 alternating rounds of {count // 3}:")
    print(f"  baseline (no policy applies)         {base:8.0f}")
    print(
        f"  one policy, three validations        {with_policy:8.0f}   {share:.0%} of baseline (target >= {POLICY_TARGET:.0%})"
    )


def main() -> None:
    import orjson

    print(
        f"deployment: {len(orjson.dumps(DEPLOYMENT))} bytes; {len(CORE)} core expressions, {len(LIBRARIES)} library ones"
    )
    print(f"{'engine':36} {'correct':>9} {'eval p50 us':>12} {'compile us':>11}  libraries")
    for factory in (engine_cel_expr_python, engine_rust, engine_celpy):
        name, figures, failures = measure(factory)
        if figures is None:
            print(f"{name:36} {failures}")
            continue
        passed, failed, total, p50, compile_us, libs = figures
        library_failures = sum(1 for f in failures if any(f.startswith(repr(e)) for e, _ in LIBRARIES))
        added = f"added ({len(LIBRARIES) - library_failures}/{len(LIBRARIES)} pass)" if libs else "not added"
        print(f"{name:36} {passed:>4}/{total:<4} {p50:>12.1f} {compile_us:>11.0f}  {added}")
        for f in failures:
            print(f"    wrong: {f}")
    print("target: eval p50 <= 20 us")
    if "--no-server" not in sys.argv:
        bench_policy_writes()


if __name__ == "__main__":
    main()
