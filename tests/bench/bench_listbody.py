"""List bodies built in slices against the whole list built at once (not a test):

    .venv/bin/python tests/bench/bench_listbody.py [--pods 5000,10000] [--rounds 5]

In-process, no server: N stored pods of about 2.8 KB (``bench_flowcontrol``'s
are 2.5 KB) are turned into a list body in JSON, protobuf and the Table form, once as the
server did before (the whole list in one synchronous step, the same-run baseline) and
once through ``server/listbody.py``. Printed per form and size: the median time to
build the body (target: within 10% of the baseline, or faster) and the longest time
the event loop was held without a turn (target <= 10 ms; the baseline holds it for
its whole time), measured by a task that notes every turn of the loop. Both are CPU
time of the thread, so that other processes on the machine do not count.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import sys
import time
from pathlib import Path

import orjson

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from apiserver_min.api import codec, protobuf  # noqa: E402 - the repository goes on sys.path first
from apiserver_min.api.kinds import REGISTRY  # noqa: E402 - likewise
from apiserver_min.registry.store import ListResult  # noqa: E402 - likewise
from apiserver_min.server import listbody  # noqa: E402 - likewise
from apiserver_min.server.negotiation import Target, table  # noqa: E402 - likewise
from tests.bench.bench_apiserver import use_uvloop  # noqa: E402 - likewise
from tests.bench.bench_protobuf import pod  # noqa: E402 - likewise

PODS = REGISTRY.by_resource("", "v1", "pods")
TABLE = Target("table", "meta.orch.io", "v1")
LANE = listbody.Turns().lane({})
HOLD_TARGET_MS = 10.0
TIME_TARGET = 1.10


def stored_pod(i: int) -> bytes:
    """``bench_protobuf``'s realistic pod (defaults, a token volume, a probe, status) as
    stored: no resourceVersion, a name of its own."""
    obj = pod()
    md = obj["metadata"]
    del md["resourceVersion"]
    md["name"] = f"web-7d4b9c8f6-{i:07d}"
    return orjson.dumps(obj)


# --- the baseline: the whole list in one step, as the server built it before -----------------


def whole_json(res: ListResult) -> bytes:
    head = b'{"kind":"PodList","apiVersion":"v1","metadata":%s,"items":[' % codec.dumps(listbody.list_metadata(res))
    return head + b",".join(codec.splice_rv(raw, rev) for raw, rev in res.items) + b"]}"


def whole_protobuf(res: ListResult) -> bytes:
    return protobuf.encode(codec.load_json(whole_json(res)))


def whole_table(res: ListResult) -> bytes:
    objs = [codec.decode_stored(raw, rev) for raw, rev in res.items]
    return codec.dumps(table(PODS, objs, TABLE, "Metadata", resource_version=str(res.resource_version)))


# --- in slices ------------------------------------------------------------------------------


async def sliced_json(res: ListResult) -> bytes:
    return await listbody.json_list(PODS, res, LANE)


async def sliced_protobuf(res: ListResult) -> bytes:
    schema = listbody.protobuf_schema(PODS)
    assert schema is not None
    return (await listbody.protobuf_list(PODS, res, schema, LANE))[0]


async def sliced_table(res: ListResult) -> bytes:
    tbl = table(PODS, [], TABLE, "Metadata", resource_version=str(res.resource_version))
    return await listbody.table_list(tbl, PODS, res, "Metadata", TABLE, LANE)


async def timed(build, res: ListResult) -> tuple[float, float, bytes]:
    """(CPU seconds, longest loop hold in CPU seconds, body) of one build; ``build`` is a
    plain function (the baseline) or a coroutine function. CPU time of this thread, not
    wall time: on a shared machine the wall clock also counts the time the process
    waited for a core, which is not time it kept the loop to itself."""
    turns: list[float] = []
    done = False

    async def watcher() -> None:
        while not done:
            turns.append(time.thread_time())
            await asyncio.sleep(0)

    task = asyncio.create_task(watcher())
    await asyncio.sleep(0)
    t0 = time.thread_time()
    body = (await build(res)) if asyncio.iscoroutinefunction(build) else build(res)
    t1 = time.thread_time()
    done = True
    await task
    marks = [t0] + [t for t in turns if t0 < t < t1] + [t1]
    return t1 - t0, max(b - a for a, b in zip(marks, marks[1:])), body


async def run(sizes: list[int], rounds: int) -> int:
    forms = (
        ("JSON", whole_json, sliced_json),
        ("protobuf", whole_protobuf, sliced_protobuf),
        ("Table", whole_table, sliced_table),
    )
    pods = [stored_pod(i) for i in range(max(sizes))]
    # The collector as the server runs it (server/app.py): what exists now frozen, a
    # young generation of 20,000.
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 10, 10)
    print(f"stored pod: {len(pods[0])} bytes; {rounds} rounds each, medians\n")
    print(f"{'figure':34s} {'sliced':>10s} {'at once':>10s} {'target':>12s}")
    missed = 0
    for n in sizes:
        res = ListResult([(raw, 1000 + i) for i, raw in enumerate(pods[:n])], 99_999, "", None)
        for label, whole, sliced in forms:
            base = [await timed(whole, res) for _ in range(rounds)]
            new = [await timed(sliced, res) for _ in range(rounds)]
            if new[0][2] != base[0][2]:
                print(f"{label} {n}: the bodies differ", file=sys.stderr)
                return 1
            t_new, t_base = statistics.median(r[0] for r in new), statistics.median(r[0] for r in base)
            h_new, h_base = statistics.median(r[1] for r in new), statistics.median(r[1] for r in base)
            ok_t, ok_h = t_new <= t_base * TIME_TARGET, h_new * 1e3 <= HOLD_TARGET_MS
            missed += (not ok_t) + (not ok_h)
            size = f"{len(new[0][2]) / 1e6:.1f} MB"
            print(
                f"{label + f' {n:,} pods ({size}) CPU ms':34s} {t_new * 1e3:10.1f} {t_base * 1e3:10.1f} "
                f"{'<=110%':>12s} {t_new / t_base:.0%} {'met' if ok_t else 'MISSED'}"
            )
            print(
                f"{'  longest loop hold CPU ms':34s} {h_new * 1e3:10.1f} {h_base * 1e3:10.1f} "
                f"{f'<={HOLD_TARGET_MS:g}':>12s} {'met' if ok_h else 'MISSED'}"
            )
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description="list bodies in slices vs at once")
    parser.add_argument("--pods", default="5000,10000", help="comma-separated list sizes")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    sizes = [int(x) for x in args.pods.split(",")]
    use_uvloop()
    return asyncio.run(run(sizes, args.rounds))


if __name__ == "__main__":
    sys.exit(main())
