"""Run ``orch-apiserver`` with the event-loop stall watcher of tests/bench/loopwatch.py
(a benchmark tool, not a test).

    .venv/bin/python tests/bench/apiserver_watched.py --out REPORT.txt -- [orch-apiserver flags]

The server runs as usual (``apiserver_min.cli.main``); the report is rewritten every
10 s and at exit.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import threading
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from apiserver_min import cli  # noqa: E402
from apiserver_min.server import app  # noqa: E402
from tests.bench.loopwatch import Watch  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="the report file")
    ap.add_argument("server_args", nargs=argparse.REMAINDER, help="-- then orch-apiserver's flags")
    args = ap.parse_args()
    server_args = args.server_args[1:] if args.server_args[:1] == ["--"] else args.server_args
    watch = Watch(Path(args.out))
    serve = app.ApiServer.serve
    sampler: list[threading.Thread] = []

    async def watched_serve(self, stop, worker):  # type: ignore[no-untyped-def]
        sampler.append(watch.start(asyncio.get_running_loop()))
        return await serve(self, stop, worker)

    app.ApiServer.serve = watched_serve  # type: ignore[method-assign]
    try:
        return cli.main(server_args)
    finally:
        watch.close(sampler[0] if sampler else None)


if __name__ == "__main__":
    sys.exit(main())
