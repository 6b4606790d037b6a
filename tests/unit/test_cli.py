"""The installed console scripts answer --version and refuse bad flags clearly."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from apiserver_min.version import __version__

BIN_DIR = Path(sys.executable).parent


def script(name: str) -> str:
    path = BIN_DIR / name
    if not path.exists():
        pytest.skip(f"{name} is not installed next to {sys.executable} (run tests/run.sh to install it)")
    return str(path)


def run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


def test_version_string():
    assert __version__ == "0.1.0"


@pytest.mark.parametrize("name", ["orch-apiserver", "orch-agent"])
def test_version(name):
    r = run(script(name), "--version")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"{name} v0.1.0"


@pytest.mark.parametrize("name", ["orch-apiserver", "orch-agent"])
def test_help(name):
    r = run(script(name), "--help")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"usage: {name}")


def test_apiserver_bad_port_names_the_flag():
    r = run(script("orch-apiserver"), "--secure-port", "nope")
    assert r.returncode == 2
    assert "--secure-port" in r.stderr and "'nope'" in r.stderr
    assert r.stderr.startswith("orch-apiserver: error:")
    assert "Traceback" not in r.stderr


def test_apiserver_bad_flag_creates_nothing(tmp_path):
    data_dir = tmp_path / "data"
    r = run(script("orch-apiserver"), "--data-dir", str(data_dir), "--storage-backend", "foo")
    assert r.returncode == 2 and "--storage-backend" in r.stderr
    assert not data_dir.exists()
