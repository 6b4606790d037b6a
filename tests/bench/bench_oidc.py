"""Authenticated GETs with OpenID Connect ID tokens against static tokens (not a test):

    .venv/bin/python tests/bench/bench_oidc.py [--rounds N] [--window S] [--conns N] [--load-procs N]

Starts one ``orch-apiserver`` (SQLite, a temporary data dir, AlwaysAllow) with a
static token file and ``--oidc-*`` flags pointing at the test identity provider
(tests/identity_provider.py, HTTPS on loopback), and drives
``GET /api/v1/namespaces/default`` with the load generator of bench_authn.py, once
with a static token and once with an RS256 ID token, in paired windows (S O S O ...
S): each OIDC window is compared with the static windows right before and after
it; the figure is the median over rounds. Printed: requests/s and the server's CPU
time per request for both, the OIDC overhead, and the target (<= 15 %). The
issuer's key-set fetches are printed too: one at start, none per request.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.bench.bench_authn import (
    HOST,
    PATH,
    STATIC_TOKEN,
    TARGET_OVERHEAD_PCT,
    BenchError,
    LoadGroup,
    Measure,
    Server,
)
from tests.identity_provider import IdentityProvider

CLIENT_ID = "orch"


class OidcServer(Server):
    def __init__(self, root: Path, idp: IdentityProvider):
        super().__init__(root)
        self.idp = idp

    def argv(self) -> list[str]:
        return super().argv() + [
            "--oidc-issuer-url",
            self.idp.issuer,
            "--oidc-client-id",
            CLIENT_ID,
            "--oidc-ca-file",
            self.idp.ca_file,
            "--oidc-username-prefix",
            "oidc:",
            "--oidc-groups-claim",
            "groups",
        ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--window", type=float, default=3.0)
    ap.add_argument("--conns", type=int, default=32)
    ap.add_argument("--load-procs", type=int, default=1)
    ap.add_argument("--max-foreign", type=float, default=0.3)
    args = ap.parse_args()
    groups: dict[str, LoadGroup] = {}
    with tempfile.TemporaryDirectory(prefix="orch-bench-oidc-") as tmp, IdentityProvider() as idp:
        root = Path(tmp)
        server = OidcServer(root, idp)
        token = idp.mint(idp.claims("bench-oidc", aud=CLIENT_ID, groups=["bench"], exp=None) | {"exp": 2**31 - 1})
        creds = {
            "static token": {"Authorization": f"Bearer {STATIC_TOKEN}"},
            "OIDC id-token": {"Authorization": f"Bearer {token}"},
        }
        try:
            server.start()
            whoami = "/apis/authentication.orch.io/v1/selfsubjectreviews"
            for method, headers in creds.items():
                status, doc = server.request("POST", whoami, {}, headers=headers)
                if status != 201:
                    raise BenchError(f"{method}: SelfSubjectReview answered {status} {doc}")
                print(f"{method:<16} authenticates as {doc['status']['userInfo']['username']}")
            fetches_before = idp.requests["/keys"]
            for method, headers in creds.items():
                base = {"port": server.port, "ca": server.ca, "path": PATH, "headers": headers}
                groups[method] = LoadGroup(method, base, args.load_procs, args.conns, root)
            for g in groups.values():
                g.wait_ready()
            for g in groups.values():
                g.window(1.0)
            measure = Measure(server, args.window, args.max_foreign)
            static_runs, oidc_runs, rps_ratios, cpu_ratios = [], [], [], []
            before = measure(groups["static token"])
            static_runs.append(before)
            for _ in range(args.rounds):
                res = measure(groups["OIDC id-token"])
                after = measure(groups["static token"])
                oidc_runs.append(res)
                static_runs.append(after)
                base_rps = (before["rps"] + after["rps"]) / 2
                base_cpu = (before["server_cpu_us"] + after["server_cpu_us"]) / 2
                rps_ratios.append(res["rps"] / base_rps)
                cpu_ratios.append(res["server_cpu_us"] / base_cpu)
                before = after
            fetches = idp.requests["/keys"] - fetches_before
        finally:
            for g in groups.values():
                g.stop()
            server.stop()

    def med(runs: list[dict], key: str) -> float:
        return statistics.median(r[key] for r in runs)

    rps_over = (1 - statistics.median(rps_ratios)) * 100
    cpu_over = (statistics.median(cpu_ratios) - 1) * 100
    print(
        f"\nGET {PATH} on {HOST}: {args.conns} keep-alive connections, {args.rounds} rounds of paired "
        f"{args.window:g} s windows, medians, {os.cpu_count()} cores"
    )
    print(f"{'method':<16}{'req/s':>10}{'CPU us/req':>12}")
    print(f"{'static token':<16}{med(static_runs, 'rps'):>10.0f}{med(static_runs, 'server_cpu_us'):>12.0f}")
    print(f"{'OIDC id-token':<16}{med(oidc_runs, 'rps'):>10.0f}{med(oidc_runs, 'server_cpu_us'):>12.0f}")
    print(
        f"OIDC overhead: {rps_over:.1f} % fewer req/s, {cpu_over:+.1f} % CPU per request "
        f"(target <= {TARGET_OVERHEAD_PCT:g} %); key-set fetches during the load: {fetches}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
