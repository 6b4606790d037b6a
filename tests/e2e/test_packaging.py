"""packaging/build-deb.sh: the wheel and the .deb, their contents, and both daemons
running from a tree unpacked with dpkg-deb -x (the venv's launchers are relocatable)."""

from __future__ import annotations

import os
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from apiserver_min.api import names
from apiserver_min.version import __version__

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def run(argv, **kw) -> subprocess.CompletedProcess:
    kw.setdefault("timeout", 120)
    return subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL, **kw)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    for tool in ("dpkg-deb", "dpkg"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is missing (Debian package dpkg)")
    out = tmp_path_factory.mktemp("dist")
    r = run(["bash", str(REPO / "packaging" / "build-deb.sh"), "--out", str(out), "--compress", "gzip"], timeout=900)
    assert r.returncode == 0, r.stderr[-4000:]
    deb = Path(r.stdout.strip().splitlines()[-1])
    assert deb.is_file() and deb.name.startswith(f"orch_{__version__}_") and deb.suffix == ".deb"
    wheels = list(out.glob(f"orch-{__version__}-*.whl"))
    assert len(wheels) == 1
    return deb, wheels[0]


@pytest.fixture(scope="module")
def unpacked(built, tmp_path_factory):
    deb, _ = built
    root = tmp_path_factory.mktemp("unpacked") / "root"
    r = run(["dpkg-deb", "-x", str(deb), str(root)])
    assert r.returncode == 0, r.stderr
    return root


def test_wheel_contents(built):
    _, wheel = built
    with zipfile.ZipFile(wheel) as z:
        files = set(z.namelist())
    for f in (
        "agent/cli.py",
        "agent/options/__init__.py",
        "agent/process.py",
        "apiserver_min/cli.py",
        "apiserver_min/api/names.py",
    ):
        assert f in files
    entry = next(f for f in files if f.endswith(".dist-info/entry_points.txt"))
    with zipfile.ZipFile(wheel) as z:
        text = z.read(entry).decode()
    assert "orch-agent = agent.cli:main" in text and "orch-apiserver = apiserver_min.cli:main" in text


def test_deb_contents(built):
    deb, _ = built
    listing = run(["dpkg-deb", "-c", str(deb)]).stdout
    entries = {}
    for line in listing.splitlines():
        parts = line.split(None, 5)
        path = parts[5].split(" -> ")[0]
        entries[path.lstrip(".")] = (parts[0], parts[1], parts[5])
    for path in (
        "/opt/orch/venv/bin/orch-agent",
        "/opt/orch/venv/bin/orch-apiserver",
        "/opt/orch/venv/pyvenv.cfg",
        "/lib/systemd/system/orch-agent.service",
        "/lib/systemd/system/orch-apiserver.service",
        "/etc/orch/orch-agent.env",
        "/etc/orch/agent/config.yaml",
        "/etc/orch/agent/manifests/",
        "/opt/orch/share/configs/agent/manifests/static-web.yaml",
        "/opt/orch/share/configs/agent/bootstrap.orchconfig.example",
    ):
        assert path in entries, path
    assert entries["/usr/bin/orch-agent"][2].endswith("-> ../../opt/orch/venv/bin/orch-agent")
    assert entries["/opt/orch/venv/bin/orch-agent"][0] == "-rwxr-xr-x"
    assert all(owner == "root/root" for _, owner, _ in entries.values())
    assert any(p.startswith("/opt/orch/venv/lib/python3.") and "/site-packages/agent/cli.py" in p for p in entries)
    for dep in ("aiohttp", "grpc", "cryptography", "yaml", "orjson"):
        assert any(f"/site-packages/{dep}/__init__.py" in p for p in entries), dep

    def field(name):
        return run(["dpkg-deb", "-f", str(deb), name]).stdout.strip()

    assert field("Package") == "orch"
    assert field("Version") == __version__
    assert field("Architecture") == run(["dpkg", "--print-architecture"]).stdout.strip()
    assert field("Depends").startswith("python3.")
    info = run(["dpkg-deb", "-I", str(deb), "conffiles"]).stdout.split()
    assert set(info) == {"/etc/orch/orch-agent.env", "/etc/orch/orch-apiserver.env", "/etc/orch/agent/config.yaml"}


@pytest.mark.parametrize("daemon", [names.AGENT_NAME, names.APISERVER_NAME])
def test_daemons_run_from_the_unpacked_tree(unpacked, daemon):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    for launcher in (unpacked / "opt/orch/venv/bin" / daemon, unpacked / "usr/bin" / daemon):
        r = run([str(launcher), "--version"], env=env, cwd="/")
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == f"{daemon} v{__version__}"


def test_the_venv_is_self_contained_and_names_no_build_path(unpacked):
    python = unpacked / "opt/orch/venv/bin/python"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    code = (
        "import sys, agent.cli, aiohttp, grpc, cryptography, yaml, orjson; print(sys.prefix); print(agent.cli.__file__)"
    )
    r = run([str(python), "-c", code], env=env, cwd="/")
    assert r.returncode == 0, r.stderr
    prefix, cli = r.stdout.split()
    assert prefix == str(unpacked / "opt/orch/venv")
    assert cli.startswith(prefix)
    assert str(REPO) not in r.stdout
    r = run(["grep", "-rl", "-F", "/tmp/orch-deb.", str(unpacked)])
    assert r.stdout == "", f"files naming the staging directory:\n{r.stdout}"
    r = run(["grep", "-rl", "-F", str(REPO), str(unpacked / "opt")])
    assert r.stdout == "", f"files naming the checkout:\n{r.stdout}"


def test_the_packaged_agent_starts_with_the_packaged_config(unpacked, tmp_path):
    swaps = tmp_path / "swaps"
    swaps.write_text("Filename\tType\tSize\tUsed\tPriority\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "NOTIFY_SOCKET")}
    env[names.ENV_AGENT_TEST_PROC_SWAPS] = str(swaps)
    # The packaged config targets systemd hosts (cgroupDriver: systemd, as containerd's
    # SystemdCgroup); where systemd is not the init system the agent rightly refuses that
    # driver, so override it with a flag (flags win over the file) and still use the file.
    driver = [] if Path("/run/systemd/system").is_dir() else ["--cgroup-driver=cgroupfs"]
    r = run(
        [
            str(unpacked / "usr/bin/orch-agent"),
            f"--config={unpacked}/etc/orch/agent/config.yaml",
            "--runonce",
            "--healthz-port=0",
            "--proxy-mode=none",  # the service proxy has its own test (test_service_proxy.py)
            f"--root-dir={tmp_path / 'state'}",
            "--deprecation-warnings=false",
            *driver,
        ],
        env=env,
        cwd="/",
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    assert '"Starting orch-agent" version="v0.1.0" mode="standalone"' in r.stderr
    assert f'config="{unpacked}/etc/orch/agent/config.yaml"' in r.stderr


def test_the_packaged_units_verify(unpacked, tmp_path):
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is missing")
    for unit in ("orch-agent.service", "orch-apiserver.service"):
        text = (unpacked / "lib/systemd/system" / unit).read_text()
        assert "ExecStart=/opt/orch/venv/bin/" in text
        copy = tmp_path / unit
        copy.write_text(text.replace("ExecStart=/opt/orch/venv/bin/", f"ExecStart={unpacked}/opt/orch/venv/bin/"))
        r = run(
            [analyze, "verify", "--man=no", str(copy)],
            env={**os.environ, "SYSTEMD_LOG_COLOR": "0", "SYSTEMD_PAGER": ""},
        )
        ours = [ln for ln in r.stderr.splitlines() if unit in ln or str(tmp_path) in ln]
        assert r.returncode == 0 and not ours, r.stderr
