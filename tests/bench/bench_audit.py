"""Audit logging's cost (not a test):

    .venv/bin/python tests/bench/bench_audit.py [--seconds S] [--rounds N]

Starts ``orch-apiserver`` (SQLite) three ways in one run: without auditing, with a
policy recording every request at Metadata into a log file, and the same at
RequestResponse. Each takes the create load of ``bench_apiserver.py`` (64 keep-alive
connections POSTing 2 KB pods) for a window of S seconds; the rounds alternate the
three servers so a busy moment of the shared machine falls on all of them. Printed:
creates/s and the server's CPU per create for each, and each audited rate as a share
of the unaudited one beside its target (Metadata >= 85%, RequestResponse >= 70%).
First, in this process, the audit path's own cost per create (policy decision, two
events built and written to a file) with a 2 KB pod as request and response body: the
part of the difference that is audit's, free of how the two cores are shared.

Every process started here is stopped by its PID before exit.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import orjson
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from apiserver_min.api import names  # noqa: E402 - the repository goes on sys.path first
from apiserver_min.api.user import UserInfo  # noqa: E402 - likewise
from apiserver_min.audit.event import RequestAudit, response_status  # noqa: E402 - likewise
from apiserver_min.audit.logbackend import LogBackend, LogOptions  # noqa: E402 - likewise
from apiserver_min.audit.policy import RequestFacts, parse_policy  # noqa: E402 - likewise
from tests.bench.bench_apiserver import Bench, BenchError, Server, stop_all, use_uvloop  # noqa: E402 - likewise

NS = "audit-bench"
TARGETS = {"Metadata": 0.85, "RequestResponse": 0.70}


class AuditedServer(Server):
    def __init__(self, root: Path, name: str, extra: list[str]):
        super().__init__(root, "sqlite")
        self.data_dir = root / f"apiserver-{name}"
        self.log_path = root / f"apiserver-{name}.log"
        self.extra = extra

    def argv(self) -> list[str]:
        return super().argv() + self.extra


def audit_args(root: Path, level: str) -> list[str]:
    policy = root / f"policy-{level}.yaml"
    policy.write_text(
        yaml.safe_dump({"apiVersion": names.AUDIT_API_VERSION, "kind": "Policy", "rules": [{"level": level}]})
    )
    return ["--audit-policy-file", str(policy), "--audit-log-path", str(root / f"audit-{level}.log")]


def audit_path_cost(root: Path, level: str, n: int = 20000) -> float:
    """Seconds of the audit path per create at ``level``, measured in this process."""
    body = orjson.loads(orjson.dumps({"kind": "Pod", "metadata": {"name": "p", "annotations": {"a": "x" * 1500}}}))
    raw = orjson.dumps(body)
    policy = parse_policy({"apiVersion": names.AUDIT_API_VERSION, "kind": "Policy", "rules": [{"level": level}]})
    backend = LogBackend(LogOptions(str(root / f"micro-{level}.log")))
    user = UserInfo("orch-admin", "", ("system:masters", "system:authenticated"))
    path = "/api/v1/namespaces/n/pods"
    t0 = time.perf_counter()
    for _ in range(n):
        decision = policy.decide(RequestFacts(user.name, user.groups, "create", True, path, "", "pods", "", "n", ""))
        record = RequestAudit(
            decision,
            "id",
            verb="create",
            request_uri=path,
            user=user,
            source_ips=["127.0.0.1"],
            user_agent="bench",
            object_ref={"resource": "pods", "namespace": "n", "apiVersion": "v1"},
        )
        backend.process(record.event("RequestReceived"))
        record.set_request_object(raw)
        record.set_response_object(raw)
        record.response_status = response_status(201, None)
        backend.process(record.event("ResponseComplete"))
    elapsed = (time.perf_counter() - t0) / n
    os.remove(root / f"micro-{level}.log")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description="audit logging's cost on creates; not a test")
    parser.add_argument("--seconds", type=float, default=8.0, help="length of each create window")
    parser.add_argument("--rounds", type=int, default=3, help="windows per server, alternating")
    parser.add_argument("--load-procs", type=int, default=2)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    use_uvloop()
    root = Path(tempfile.mkdtemp(prefix="orch-bench-audit-"))
    bench = Bench(args, {}, root)
    configs = {
        "none": [],
        "Metadata": audit_args(root, "Metadata"),
        "RequestResponse": audit_args(root, "RequestResponse"),
    }
    for level in TARGETS:
        print(f"audit path alone, {level}: {audit_path_cost(root, level) * 1e6:.0f} us per create", flush=True)
    servers = {name: AuditedServer(root, name, extra) for name, extra in configs.items()}
    rates: dict[str, list[float]] = {n: [] for n in servers}
    cpu: dict[str, list[float]] = {n: [] for n in servers}
    try:
        for name, server in servers.items():
            server.start()
            status, body = server.api("POST", "/api/v1/namespaces", {"metadata": {"name": NS}})
            if status != 201:
                raise BenchError(f"{name}: creating namespace: {status} {body[:200]!r}")
        for _ in range(args.rounds):
            for name, server in servers.items():
                r = bench.load_window(server.port, server.creds, "create", NS, args.seconds, (server.pid,), label=name)
                if r["errors"]:
                    raise BenchError(f"{name}: errors {r['errors']}: {r['first_error']}")
                rates[name].append(r["rate"])
                cpu[name].append(r["cpu_per_req"][0])
                print(
                    f"  {name:16s} {r['rate']:8.0f} creates/s  {r['cpu_per_req'][0] * 1e6:6.0f} us CPU/create",
                    flush=True,
                )
        base = statistics.median(rates["none"])
        print(f"\n{'audit':16s} {'creates/s':>10s} {'CPU/create':>11s} {'share':>7s} {'target':>7s}")
        for name in servers:
            rate = statistics.median(rates[name])
            share = rate / base
            target = TARGETS.get(name)
            verdict = "" if target is None else ("met" if share >= target else "MISSED")
            print(
                f"{name:16s} {rate:10.0f} {statistics.median(cpu[name]) * 1e6:9.0f}us {share:7.0%} "
                f"{'' if target is None else f'>={target:.0%}':>7s} {verdict}"
            )
        for level in TARGETS:
            log = root / f"audit-{level}.log"
            print(f"{level} log: {log.stat().st_size / 1e6:.1f} MB")
        return 0
    except BenchError as exc:
        print(f"benchmark failed: {exc}", file=sys.stderr)
        return 1
    finally:
        for server in servers.values():
            server.stop()
        stop_all()
        if args.keep:
            print(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
