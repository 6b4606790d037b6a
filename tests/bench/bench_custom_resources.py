"""Custom resource cost (not a test):

    .venv/bin/python tests/bench/bench_custom_resources.py [--seconds 4] [--rounds 3] [--crds 20]
                                                             [--cprofile DIR]

Starts ``orch-apiserver`` (SQLite, a subprocess) and prints:

* creates/s of a custom resource whose schema has 20 typed fields (with a pattern,
  bounds and a default) and three validation rules (``x-kubernetes-validations``: a
  comparison of two fields, a string rule with ``matches``, a list rule with
  ``all()``) against ConfigMap creates of the same size, in alternating windows on
  32 keep-alive connections (target: custom resources at 60% or more), with the
  server's CPU per create; beside them the same schema without its rules (what the
  rules cost);
* how long a definition takes from its create to its resource being listed in
  discovery (``/apis/<group>/<version>``), over ``--crds`` definitions: p50 and p99
  (target: p99 at most 1 s).

The load runs in this process (asyncio, bench_apiserver's HTTP/1.1 client); the
server process is stopped by its PID before exit. ``--cprofile DIR`` starts the
server under bench_apiserver's cProfile switch and profiles one extra window of
custom resource creates and one of ConfigMap creates (their figures are not
comparable; the measured windows run with the profiler off), printing the functions
that dominate. ``--baseline TREE`` also starts a server from another checkout (say
main, for a change's before and after) and measures it window by window beside this
tree's, in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import itertools
import os
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import bench_apiserver as ba

GROUP = "bench.example.com"
NS = "crd-bench"
CONNS = 32


def definition(plural: str, kind: str, with_rules: bool = True) -> dict:
    fields: dict[str, dict] = {}
    for i in range(20):
        if i % 4 == 0:
            fields[f"s{i}"] = {"type": "string", "maxLength": 64, "pattern": "^[a-z0-9-]*$"}
        elif i % 4 == 1:
            fields[f"n{i}"] = {"type": "integer", "minimum": 0, "maximum": 1000, "default": 1}
        elif i % 4 == 2:
            fields[f"b{i}"] = {"type": "boolean"}
        else:
            fields[f"l{i}"] = {
                "type": "array",
                "maxItems": 16,
                "items": {"type": "string", "maxLength": 32},
                "x-kubernetes-list-type": "set",
            }
    spec: dict = {"type": "object", "properties": fields}
    if with_rules:  # where such rules usually sit: on the object and on single fields
        spec["x-kubernetes-validations"] = [{"rule": "self.n1 <= self.n5", "message": "n1 must not exceed n5"}]
        fields["s0"]["x-kubernetes-validations"] = [{"rule": "self.matches('^value-[0-9]+$')"}]
        fields["l3"]["x-kubernetes-validations"] = [{"rule": "self.all(x, size(x) <= 8)"}]
    return {
        "apiVersion": "apiextensions.orch.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"plural": plural, "kind": kind},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {"spec": spec},
                        }
                    },
                }
            ],
        },
    }


def widget_spec() -> dict:
    spec: dict = {}
    for i in range(20):
        if i % 4 == 0:
            spec[f"s{i}"] = f"value-{i}"
        elif i % 4 == 1:
            spec[f"n{i}"] = i
        elif i % 4 == 2:
            spec[f"b{i}"] = True
        else:
            spec[f"l{i}"] = ["a", "b", "c"]
    return spec


async def window(server: ba.Server, path: str, template: dict, seconds: float, tag: str) -> tuple[float, float]:
    """Creates/s over one window, and the server's CPU seconds per create."""
    ctx = ba.client_ssl(server.creds)
    conns = await asyncio.gather(*(ba.HttpConn.open(server.port, ctx) for _ in range(CONNS)))
    seq = itertools.count()
    ok = 0
    end = time.perf_counter() + seconds
    head, tail = orjson.dumps(template).split(b'"NAME"')

    async def run(conn: ba.HttpConn) -> None:
        nonlocal ok
        while time.perf_counter() < end:
            status, body = await conn.request("POST", path, head + b'"%s-%d"' % (tag.encode(), next(seq)) + tail)
            if status != 201:
                raise ba.BenchError(f"{path}: {status} {body[:300]!r}")
            ok += 1

    cpu0 = server.cpu()
    t0 = time.perf_counter()
    await asyncio.gather(*(run(c) for c in conns))
    elapsed = time.perf_counter() - t0
    cpu = server.cpu() - cpu0
    for c in conns:
        c.close()
    return ok / elapsed, cpu / max(ok, 1)


def discovery_latency(server: ba.Server, n: int) -> list[float]:
    out = []
    for i in range(n):
        plural = f"gadgets{i}"
        t0 = time.perf_counter()
        status, body = server.api("POST", "/apis/apiextensions.orch.io/v1/customresourcedefinitions",
                                  definition(plural, f"Gadget{i}"))  # fmt: skip
        if status != 201:
            raise ba.BenchError(f"definition create: {status} {body[:300]!r}")
        while True:
            status, body = server.api("GET", f"/apis/{GROUP}/v1")
            if status == 200 and any(r["name"] == plural for r in orjson.loads(body)["resources"]):
                break
            if time.perf_counter() - t0 > 10:
                raise ba.BenchError(f"{plural} not in discovery after 10 s")
            time.sleep(0.005)
        out.append(time.perf_counter() - t0)
    return out


def print_profile(path: Path) -> None:
    for order, limit in (("tottime", 30), ("cumulative", 40)):
        out = io.StringIO()
        pstats.Stats(str(path), stream=out).sort_stats(order).print_stats(limit)
        text = out.getvalue()
        print(f"\n{path.stem}, by {order}:")
        for line in text[text.find("   ncalls") :].rstrip().splitlines():
            print("  " + line[:200])


KINDS = {
    # what is created: its collection (the templates are built in main())
    "configmaps": f"/api/v1/namespaces/{NS}/configmaps",
    "widgets": f"/apis/{GROUP}/v1/namespaces/{NS}/widgets",
    "plainwidgets": f"/apis/{GROUP}/v1/namespaces/{NS}/plainwidgets",
}


def templates() -> dict[str, dict]:
    payload = orjson.dumps(widget_spec()).decode()
    out: dict[str, dict] = {
        "configmaps": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "NAME"}, "data": {"spec": payload}}
    }
    for what, kind in (("widgets", "Widget"), ("plainwidgets", "PlainWidget")):
        out[what] = {"apiVersion": f"{GROUP}/v1", "kind": kind, "metadata": {"name": "NAME"}, "spec": widget_spec()}
    return out


def start_server(root: Path, tree: Path | None, cprofile_dir: str | None = None) -> ba.Server:
    """A server of this checkout, or of ``tree`` (another checkout: its code first on
    the server's path; ``ba.Server`` puts this checkout's there otherwise), with the
    namespace and the two definitions created."""
    root.mkdir(parents=True, exist_ok=True)
    server = ba.Server(root, "sqlite", cprofile_dir=cprofile_dir)
    saved = os.environ.get("PYTHONPATH")
    if tree is not None:
        os.environ["PYTHONPATH"] = str(tree)
    try:
        server.start()
    finally:
        if tree is not None:
            if saved is None:
                os.environ.pop("PYTHONPATH", None)
            else:
                os.environ["PYTHONPATH"] = saved
    server.api("POST", "/api/v1/namespaces", {"metadata": {"name": NS}})
    for plural, kind, with_rules in (("widgets", "Widget", True), ("plainwidgets", "PlainWidget", False)):
        status, body = server.api(
            "POST", "/apis/apiextensions.orch.io/v1/customresourcedefinitions", definition(plural, kind, with_rules)
        )
        if status != 201:
            raise ba.BenchError(f"definition {plural}: {status} {body[:300]!r}")
    return server


def report(label: str, rounds: int, rates: dict[str, list[float]], cpus: dict[str, list[float]]) -> None:
    cm, cr, plain = (statistics.median(rates[w]) for w in KINDS)
    cm_cpu, cr_cpu, plain_cpu = (1000 * statistics.median(cpus[w]) for w in KINDS)
    print(f"{label}ConfigMap creates/s (median of {rounds}): {cm:.0f}  (server CPU {cm_cpu:.2f} ms per create)")
    print(
        f"{label}custom resource (20-field schema, 3 rules) creates/s:  {cr:.0f}  "
        f"({100 * cr / cm:.0f}% of ConfigMap; target >= 60%)  (server CPU {cr_cpu:.2f} ms per create, "
        f"{100 * cm_cpu / cr_cpu:.0f}% of ConfigMap's rate by CPU)"
    )
    print(
        f"{label}  the same schema without rules:  {plain:.0f}  ({100 * plain / cm:.0f}% of ConfigMap)  "
        f"(server CPU {plain_cpu:.2f} ms per create)"
    )


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--crds", type=int, default=20)
    ap.add_argument("--cprofile", metavar="DIR", help="profile an extra window of custom resource creates")
    ap.add_argument(
        "--baseline",
        metavar="TREE",
        help="another checkout of the project (e.g. main) whose server is measured in the same run, "
        "each window right beside this tree's",
    )
    args = ap.parse_args()
    ba.use_uvloop()
    prof_dir = Path(args.cprofile).resolve() if args.cprofile else None
    if prof_dir is not None:
        prof_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="crd-bench-") as tmp:
        servers: dict[str, ba.Server] = {}
        try:
            servers["this tree"] = start_server(Path(tmp) / "this", None, str(prof_dir) if prof_dir else None)
            if args.baseline:
                servers["baseline"] = start_server(Path(tmp) / "baseline", Path(args.baseline).resolve())
            server = servers["this tree"]
            lat = discovery_latency(server, args.crds)
            tpl = templates()
            rates = {name: {what: [] for what in KINDS} for name in servers}
            cpus = {name: {what: [] for what in KINDS} for name in servers}
            for r in range(args.rounds):
                order = list(KINDS) if r % 2 == 0 else list(reversed(KINDS))
                for what in order:
                    names = list(servers) if r % 2 == 0 else list(reversed(servers))
                    for name in names:
                        rate, cpu = asyncio.run(window(servers[name], KINDS[what], tpl[what], args.seconds, f"r{r}"))
                        rates[name][what].append(rate)
                        cpus[name][what].append(cpu)
            lat.sort()
            for name in servers:
                report(f"[{name}] " if args.baseline else "", args.rounds, rates[name], cpus[name])
            if args.baseline:
                after = statistics.median(cpus["this tree"]["widgets"])
                before = statistics.median(cpus["baseline"]["widgets"])
                print(
                    f"custom resource server CPU per create, this tree / baseline (same run): "
                    f"{1000 * after:.2f} / {1000 * before:.2f} ms = {100 * after / before:.0f}%"
                )
            print(
                f"definition created -> served in discovery over {len(lat)}: p50 {1000 * ba.pct(lat, 0.5):.0f} ms, "
                f"p99 {1000 * ba.pct(lat, 0.99):.0f} ms, max {1000 * lat[-1]:.0f} ms (target p99 <= 1000 ms)"
            )
            if prof_dir is not None:
                for what in ("widgets", "configmaps"):
                    run = ba.CProfileRun(server.pid, f"{what}-creates", prof_dir)
                    run.start()
                    try:
                        asyncio.run(window(server, KINDS[what], tpl[what], args.seconds, f"prof-{what}"))
                    finally:
                        run.stop()
                    print_profile(run.path)
        finally:
            for server in servers.values():
                server.stop()
            ba.stop_all()
    return 0


if __name__ == "__main__":
    sys.exit(main())
