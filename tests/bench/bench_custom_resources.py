"""Custom resource cost (not a test):

    .venv/bin/python tests/bench/bench_custom_resources.py [--seconds 4] [--rounds 3] [--crds 20]

Starts ``orch-apiserver`` (SQLite, a subprocess) and prints:

* creates/s of a custom resource whose schema has 20 typed fields (with a pattern,
  bounds and a default) against ConfigMap creates of the same size, in alternating
  windows on 32 keep-alive connections (target: custom resources at 60% or more);
* how long a definition takes from its create to its resource being listed in
  discovery (``/apis/<group>/<version>``), over ``--crds`` definitions: p50 and p99
  (target: p99 at most 1 s).

The load runs in this process (asyncio, bench_apiserver's HTTP/1.1 client); the
server process is stopped by its PID before exit.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
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


def definition(plural: str, kind: str) -> dict:
    fields: dict[str, dict] = {}
    for i in range(20):
        if i % 4 == 0:
            fields[f"s{i}"] = {"type": "string", "maxLength": 64, "pattern": "^[a-z0-9-]*$"}
        elif i % 4 == 1:
            fields[f"n{i}"] = {"type": "integer", "minimum": 0, "maximum": 1000, "default": 1}
        elif i % 4 == 2:
            fields[f"b{i}"] = {"type": "boolean"}
        else:
            fields[f"l{i}"] = {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"}
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
                            "properties": {"spec": {"type": "object", "properties": fields}},
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


async def window(port: int, creds: dict, path: str, template: dict, seconds: float, tag: str) -> float:
    ctx = ba.client_ssl(creds)
    conns = await asyncio.gather(*(ba.HttpConn.open(port, ctx) for _ in range(CONNS)))
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

    t0 = time.perf_counter()
    await asyncio.gather(*(run(c) for c in conns))
    elapsed = time.perf_counter() - t0
    for c in conns:
        c.close()
    return ok / elapsed


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


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--crds", type=int, default=20)
    args = ap.parse_args()
    ba.use_uvloop()
    with tempfile.TemporaryDirectory(prefix="crd-bench-") as tmp:
        server = ba.Server(Path(tmp), "sqlite")
        try:
            server.start()
            server.api("POST", "/api/v1/namespaces", {"metadata": {"name": NS}})
            server.api(
                "POST", "/apis/apiextensions.orch.io/v1/customresourcedefinitions", definition("widgets", "Widget")
            )
            lat = discovery_latency(server, args.crds)
            widget = {
                "apiVersion": f"{GROUP}/v1",
                "kind": "Widget",
                "metadata": {"name": "NAME"},
                "spec": widget_spec(),
            }
            payload = orjson.dumps(widget_spec()).decode()
            configmap = {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "NAME"},
                "data": {"spec": payload},
            }
            rates: dict[str, list[float]] = {"configmaps": [], "widgets": []}
            for r in range(args.rounds):
                order = ("configmaps", "widgets") if r % 2 == 0 else ("widgets", "configmaps")
                for what in order:
                    path = (f"/api/v1/namespaces/{NS}/configmaps" if what == "configmaps"
                            else f"/apis/{GROUP}/v1/namespaces/{NS}/widgets")  # fmt: skip
                    template = configmap if what == "configmaps" else widget
                    rates[what].append(
                        asyncio.run(window(server.port, server.creds, path, template, args.seconds, f"r{r}"))
                    )
            cm, cr = statistics.median(rates["configmaps"]), statistics.median(rates["widgets"])
            lat.sort()
            print(f"ConfigMap creates/s (median of {args.rounds}): {cm:.0f}")
            print(
                f"custom resource (20-field schema) creates/s:  {cr:.0f}  ({100 * cr / cm:.0f}% of ConfigMap; target >= 60%)"
            )
            print(
                f"definition created -> served in discovery over {len(lat)}: p50 {1000 * ba.pct(lat, 0.5):.0f} ms, "
                f"p99 {1000 * ba.pct(lat, 0.99):.0f} ms, max {1000 * lat[-1]:.0f} ms (target p99 <= 1000 ms)"
            )
        finally:
            server.stop()
            ba.stop_all()
    return 0


if __name__ == "__main__":
    sys.exit(main())
