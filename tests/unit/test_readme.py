"""The README says only what is true at this commit.

Two checks: every path named in "Where each part lives" exists, and the parts the
architecture picture and the "Works now" list name are backed by their code (a
capability listed below may appear there only once the path beside it exists).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()

# Capabilities the README could claim before their code exists, each with the
# path that holds it. A phrase may stand in the picture or "Works now" only when
# its path exists.
CAPABILITIES = {
    # API server processes sharing the port (issue 22).
    "--workers": "apiserver_min/server/workers.py",
    # The agent's TLS session resumption toward the API server (issue 22).
    "resume an earlier TLS session": "agent/client/rest.py",
    # The node's eviction manager (pods/eviction and kubectl drain are the API server's).
    "eviction manager": "agent/eviction",
    "node pressure": "agent/eviction",
    "pods/eviction": "apiserver_min/registry/eviction.py",
    "graceful node shutdown": "agent/nodeshutdown",
    "resource metrics API": "apiserver_min/server/resourcemetrics.py",
    "audit": "apiserver_min/audit",
    "encrypt": "apiserver_min/storage/encryption.py",
    "OpenID Connect": "apiserver_min/authn/oidc.py",
    "ABAC policy files": "apiserver_min/authz/abac.py",
    "authorization webhook": "apiserver_min/authz/webhook.py",
    "--request-timeout": "apiserver_min/server/timeouts.py",
    "image/container GC": "agent/images",
    "image garbage collection": "agent/images",
    "service proxy": "agent/proxy",
    "admission webhooks": "apiserver_min/admission/webhook",
    "matchPolicy: Equivalent": "apiserver_min/admission/equivalence.py",
    "custom resource": "apiserver_min/apiextensions",
    "endpoint slices": "apiserver_min/controllers",
    "API priority and fairness": "apiserver_min/server/flowcontrol",
    "CPU manager": "agent/cm/cpumanager",
    "memory manager": "agent/cm/memorymanager",
    "topology manager": "agent/cm/topologymanager",
    "device plugins": "agent/cm/devicemanager",
    "pod resources API": "agent/server/podresources.py",
    "credential provider plugins": "agent/runtime/credentialprovider.py",
    "Image pull secrets": "agent/runtime/keyring.py",
    "is not supported on this node": "agent/unsupported.py",
    "pods/ephemeralcontainers": "apiserver_min/api/podvalidation.py",
    "over SPDY": "apiserver_min/server/podexec_spdy.py",
    "hollow nodes": "tests/bench/hollow.py",
    "Faults that lose nothing": "tests/e2e/test_faults_node.py",
    "soak.py": "tests/bench/soak.py",
}


def _section(title: str) -> str:
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", README, re.S | re.M)
    assert match, f"README has no section {title!r}"
    return match.group(1)


def _claims() -> str:
    """The architecture picture and the "Works now" part of the status."""
    status = _section("Status")
    works_now = status.split("Still to come", 1)[0]
    return _section("Architecture") + works_now


def test_where_each_part_lives_names_existing_paths():
    table = _section("Where each part lives")
    paths = []
    for line in table.splitlines():
        if not line.startswith("| `"):
            continue
        first_cell = line.split("|")[1]
        paths += re.findall(r"`([^`]+)`", first_cell)
    assert paths, "no paths found in the table"
    base = None
    missing = []
    for p in paths:
        candidate = REPO / p
        if "/" not in p.rstrip("/") and base is not None and not candidate.exists():
            candidate = base / p  # `options.py` after `apiserver_min/options.py` in one cell
        if candidate.exists():
            base = candidate.parent if candidate.is_file() else candidate
        else:
            missing.append(p)
    assert not missing, f"README names paths that do not exist: {missing}"


@pytest.mark.parametrize("phrase", sorted(CAPABILITIES))
def test_claimed_parts_exist(phrase):
    if phrase.lower() not in " ".join(_claims().split()).lower():
        return
    path = REPO / CAPABILITIES[phrase]
    assert path.exists(), f"README claims {phrase!r} but {CAPABILITIES[phrase]} does not exist"
