"""Shared fixtures: the real components (containerd, etcd) for the whole session."""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from pathlib import Path

import pytest

from tests.apiserver_fixtures import *  # noqa: E402,F401,F403 - apiserver, apiserver_etcd, kubectl, k8s_client
from tests.components import Containerd, Etcd, image_builder, missing_binaries

try:
    from xdist.scheduler import LoadScopeScheduling
except ImportError:  # without pytest-xdist the tests run in one process
    LoadScopeScheduling = None

TESTS_DIR = Path(__file__).resolve().parent
E2E_DIR = TESTS_DIR / "e2e"

# With pytest-xdist (tests/run.sh runs two workers, ``--dist loadscope``), the tests that
# use the host's shared parts — the session containerd and its images, cgroups, nftables,
# network namespaces, bridges, the agent's default directories — all run on one worker,
# one after another, as they do without xdist. The rest (unit tests and API server
# integration tests, each server on its own free port and data directory) spreads over
# both workers a module at a time (its module-scoped fixtures start once).
HOST_GROUP = "host"


def _on_host(relpath: str) -> bool:
    """For a test file's path relative to the repository: the e2e tests, and the
    integration tests that run a node agent (its container and log garbage collection
    works on the machine's shared directories such as /var/log/pods, and some move
    processes between cgroups)."""
    return relpath.startswith("tests/e2e/") or relpath.startswith("tests/integration/test_agent_")


if LoadScopeScheduling is not None:

    class HostScopeScheduling(LoadScopeScheduling):
        """``--dist loadscope`` with one scope for every host-bound test (see above)."""

        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return HOST_GROUP if _on_host(path) else path

    def pytest_xdist_make_scheduler(config, log):
        if config.getvalue("dist") == "loadscope":
            return HostScopeScheduling(config, log)
        return None


def pytest_collection_modifyitems(config, items):
    for item in items:
        if E2E_DIR in Path(item.path).resolve().parents:
            item.add_marker(pytest.mark.e2e)


def _skip_unless_available(component: str, binaries, *, needs_root: bool) -> None:
    if needs_root and os.geteuid() != 0:
        pytest.skip(f"{component} tests need root (running as uid {os.geteuid()})")
    missing = missing_binaries(binaries)
    if missing:
        pytest.skip(f"{component} tests need {', '.join(missing)} on PATH (see tests/run.sh)")


@pytest.fixture(scope="session")
def containerd():
    """A private containerd (CRI enabled) for the session; see tests/components.py."""
    _skip_unless_available("containerd", Containerd.binaries, needs_root=True)
    with Containerd() as instance:
        yield instance


@pytest.fixture(scope="session")
def cri_images(containerd) -> dict[str, str]:
    """orch.local/busybox:1 and orch.local/pause:1 imported into the session
    containerd (namespace k8s.io); image name -> CRI image ID."""
    builder = image_builder()
    if not Path(builder.DEFAULT_BUSYBOX).is_file():
        pytest.skip(f"test images need {builder.DEFAULT_BUSYBOX} (Debian busybox-static)")
    return builder.ensure_images(containerd.address)


@pytest.fixture(scope="session")
def etcd():
    """A single-member etcd on loopback for the session; tests share it through etcd_prefix."""
    _skip_unless_available("etcd", Etcd.binaries, needs_root=False)
    with Etcd() as instance:
        yield instance


@pytest.fixture
def etcd_prefix() -> str:
    """A key prefix no other test uses, e.g. /orch-test/<hex>/."""
    return f"/orch-test/{uuid.uuid4().hex}/"


@pytest.fixture
def short_tmp_path():
    """A fresh directory with a short path (``/tmp/orch-XXXXXXXX``), removed afterwards: for
    tests that put unix sockets under it (an agent's --root-dir), since a socket path may not
    exceed 107 bytes and a pytest-xdist worker's ``tmp_path`` is long."""
    path = Path(tempfile.mkdtemp(prefix="orch-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)
