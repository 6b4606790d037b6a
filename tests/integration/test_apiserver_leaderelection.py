"""Two API servers on one etcd: the bundled controllers run in exactly one of them (the holder
of the Lease orch-system/orch-controllers), and the other takes over when the leader stops
cleanly (the Lease is released) or dies (the Lease expires)."""

from __future__ import annotations

import shutil
import time

import pytest

from tests.apiserver_fixtures import ApiServerProcess
from tests.helpers import wait_for

LEASE = "/apis/coordination.orch.io/v1/namespaces/orch-system/leases/orch-controllers"
FLAGS = ["--leader-elect-lease-duration=3s", "--leader-elect-renew-deadline=2s", "--leader-elect-retry-period=0.5s"]

pytestmark = pytest.mark.slow


def leads(server: ApiServerProcess) -> int:
    return server.log_path.read_text(errors="replace").count("became the leader of the bundled controllers")


def lease(server: ApiServerProcess) -> dict | None:
    code, body = server.json("GET", LEASE)
    return body if code == 200 else None


def default_sa(server: ApiServerProcess, ns: str) -> bool:
    code, _ = server.json("GET", f"/api/v1/namespaces/{ns}/serviceaccounts/default")
    return code == 200


def test_one_leader_runs_the_controllers_and_hands_over(etcd, etcd_prefix, tmp_path):
    a = ApiServerProcess(
        tmp_path / "a", backend="etcd3", etcd_endpoint=etcd.endpoint, etcd_prefix=etcd_prefix, extra_args=FLAGS
    )
    b = ApiServerProcess(
        tmp_path / "b", backend="etcd3", etcd_endpoint=etcd.endpoint, etcd_prefix=etcd_prefix, extra_args=FLAGS
    )
    try:
        a.start()
        # One cluster: the second server shares the first one's CA and admin credentials.
        (tmp_path / "b").mkdir()
        shutil.copytree(a.data_dir / "pki", b.data_dir / "pki")
        shutil.copy(a.kubeconfig, b.kubeconfig)
        b.start()
        wait_for(lambda: leads(a), 10, "the first server to lead")
        first = wait_for(lambda: lease(a), 5, "the lease")
        assert first["spec"]["leaseDurationSeconds"] == 3
        time.sleep(1.5)  # b campaigns meanwhile, in vain
        assert leads(b) == 0
        assert "waiting to lead the bundled controllers" in b.log_path.read_text()
        # The controllers act (the namespace's default ServiceAccount), whichever server was asked.
        b.json("POST", "/api/v1/namespaces", {"metadata": {"name": "le-one"}}, expect=201)
        wait_for(lambda: default_sa(b, "le-one"), 10, "the default ServiceAccount")
        renewed = wait_for(
            lambda: (cur := lease(b)) and cur["spec"]["renewTime"] != first["spec"]["renewTime"] and cur, 5, "a renewal"
        )
        assert renewed["spec"]["holderIdentity"] == first["spec"]["holderIdentity"]

        # A clean stop releases the lease: b leads at once, not a lease duration later.
        t0 = time.monotonic()
        a.stop()
        wait_for(lambda: leads(b), 5, "the second server to lead")
        assert time.monotonic() - t0 < 5
        second = lease(b)
        assert second["spec"]["holderIdentity"] != first["spec"]["holderIdentity"]
        assert second["spec"]["leaseTransitions"] == first["spec"]["leaseTransitions"]  # released, not taken
        b.json("POST", "/api/v1/namespaces", {"metadata": {"name": "le-two"}}, expect=201)
        wait_for(lambda: default_sa(b, "le-two"), 10, "the default ServiceAccount from the new leader")

        # A dead leader: the lease runs out and the restarted first server takes over.
        b.kill()
        before = leads(a)
        a.start()
        wait_for(lambda: leads(a) > before, 15, "the first server to lead again after the lease expired")
        third = lease(a)
        assert third["spec"]["leaseTransitions"] == second["spec"]["leaseTransitions"] + 1
    finally:
        b.stop()
        a.stop()


def test_sqlite_server_runs_controllers_without_a_lease(tmp_path):
    with ApiServerProcess(tmp_path / "s") as s:
        s.json("POST", "/api/v1/namespaces", {"metadata": {"name": "le-sqlite"}}, expect=201)
        wait_for(lambda: default_sa(s, "le-sqlite"), 10, "the default ServiceAccount")
        assert lease(s) is None


def test_leader_election_flags_are_checked(tmp_path):
    from apiserver_min.options import OptionsError
    from apiserver_min.options import parse as parse_options

    with pytest.raises(OptionsError, match="--leader-elect-renew-deadline must be less than"):
        parse_options(["--leader-elect-lease-duration=5s", "--leader-elect-renew-deadline=5s"])
    with pytest.raises(OptionsError, match="invalid value 'x' for flag --leader-elect-retry-period"):
        parse_options(["--leader-elect-retry-period=x"])
    opts = parse_options(["--leader-elect=false"])
    assert opts.leader_elect is False and opts.leader_elect_lease_duration == 15.0
