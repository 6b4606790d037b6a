"""The systemd unit files pass `systemd-analyze verify`.

`systemd-analyze verify` refuses a unit whose ExecStart binary does not exist,
and the units name the installed path (/opt/orch/venv/...), which exists only
after packaging/quickstart.sh. So each unit is verified as a copy whose ExecStart
points at the same console script in the running venv; the unit is verified as
it is too when the installed path exists. Warnings count as failures: systemd
only warns (exit 0) about unknown keys or unparsable values.
"""

from __future__ import annotations

import configparser
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from apiserver_min.options import parse

SYSTEMD_DIR = Path(__file__).resolve().parents[2] / "systemd"
VENV_BIN = Path(sys.executable).parent
INSTALLED_BIN = Path("/opt/orch/venv/bin")

UNITS = {"orch-apiserver.service": "orch-apiserver", "orch-agent.service": "orch-agent"}


def systemd_analyze() -> str:
    path = shutil.which("systemd-analyze")
    if path is None:
        pytest.skip(
            "systemd-analyze is not installed (Debian package 'systemd'); the unit files cannot be verified here"
        )
    return path


def verify(unit: Path) -> None:
    r = subprocess.run(
        [systemd_analyze(), "verify", "--man=no", str(unit)],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "SYSTEMD_LOG_COLOR": "0", "SYSTEMD_PAGER": ""},
    )
    # Lines about other units (a distribution's own files) are not ours to fix.
    ours = [line for line in r.stderr.splitlines() if unit.name in line or str(unit.parent) in line]
    assert r.returncode == 0 and not ours, f"systemd-analyze verify {unit}:\n{r.stderr}"


def with_exec_start(unit: Path, bin_dir: Path, dest_dir: Path) -> Path:
    text = unit.read_text()
    assert f"ExecStart={INSTALLED_BIN}/" in text
    dest_dir.mkdir(parents=True, exist_ok=True)
    copy = dest_dir / unit.name  # same name: verify derives the unit name from it
    copy.write_text(text.replace(f"ExecStart={INSTALLED_BIN}/", f"ExecStart={bin_dir}/"))
    return copy


def read_unit(unit: Path) -> configparser.ConfigParser:
    cp = configparser.ConfigParser(strict=False, interpolation=None, delimiters=("=",))
    cp.optionxform = str  # keys are case-sensitive
    cp.read(unit)
    return cp


@pytest.mark.parametrize("name", sorted(UNITS))
def test_unit_verifies(name, tmp_path):
    script = VENV_BIN / UNITS[name]
    if not script.exists():
        pytest.skip(f"{script} is missing (run tests/run.sh to install the project into its venv)")
    verify(with_exec_start(SYSTEMD_DIR / name, VENV_BIN, tmp_path))


@pytest.mark.parametrize("name", sorted(UNITS))
def test_installed_unit_verifies_as_it_is(name):
    if not (INSTALLED_BIN / UNITS[name]).exists():
        pytest.skip(f"{INSTALLED_BIN / UNITS[name]} is not installed (packaging/quickstart.sh installs it)")
    verify(SYSTEMD_DIR / name)


def test_verification_is_real(tmp_path):
    """A broken copy fails, so a passing verify means something."""
    unit = with_exec_start(SYSTEMD_DIR / "orch-apiserver.service", VENV_BIN, tmp_path / "a")
    broken = tmp_path / "b" / unit.name
    broken.parent.mkdir()
    broken.write_text(unit.read_text().replace("Type=simple", "Type=bogus"))
    with pytest.raises(AssertionError, match="bogus"):
        verify(broken)
    broken.write_text(unit.read_text().replace(f"ExecStart={VENV_BIN}/", "ExecStart=/nonexistent/"))
    with pytest.raises(AssertionError, match="not executable"):
        verify(broken)


def test_apiserver_unit_contents():
    cp = read_unit(SYSTEMD_DIR / "orch-apiserver.service")
    service = cp["Service"]
    assert service["Type"] == "simple"  # the server does not send sd_notify READY=1 (yet)
    assert service["ExecStart"] == "/opt/orch/venv/bin/orch-apiserver $ORCH_APISERVER_ARGS"
    assert service["EnvironmentFile"] == "-/etc/orch/orch-apiserver.env"
    assert service["Restart"] == "always"
    assert int(service["LimitNOFILE"]) >= 65536
    assert "network-online.target" in cp["Unit"]["After"]
    assert cp["Install"]["WantedBy"] == "multi-user.target"


def test_example_environment_file_matches_the_unit():
    env = Path(__file__).resolve().parents[2] / "configs" / "apiserver.env"
    lines = [ln for ln in env.read_text().splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    assert lines and all(ln.startswith("ORCH_APISERVER_ARGS=") for ln in lines), lines
    # systemd strips the quotes around the value; "$ORCH_APISERVER_ARGS" unquoted in
    # ExecStart then splits it at whitespace.
    args = lines[-1].split("=", 1)[1].strip().strip('"').split()
    opts = parse(args)  # every flag in the example is valid
    assert opts.storage_backend == "sqlite"


def test_agent_unit_contents():
    cp = read_unit(SYSTEMD_DIR / "orch-agent.service")
    service = cp["Service"]
    assert service["Type"] == "notify"  # READY=1 once the loops run, WATCHDOG=1, STOPPING=1
    assert service["NotifyAccess"] == "main"
    assert service["ExecStart"] == "/opt/orch/venv/bin/orch-agent $ORCH_AGENT_ARGS"
    assert service["EnvironmentFile"] == "-/etc/orch/orch-agent.env"
    assert service["Restart"] == "always"
    assert service["RestartPreventExitStatus"] == "2"  # a bad flag or config file
    assert service["WatchdogSec"] == "30s"
    assert service["Delegate"] == "yes"  # the agent manages the pod cgroups below its own
    assert service["KillMode"] == "process"  # stopping the agent leaves containers running
    assert int(service["LimitNOFILE"]) >= 1000000
    assert "containerd.service" in cp["Unit"]["After"].split()
    assert "containerd.service" in cp["Unit"]["Wants"].split()
    assert cp["Install"]["WantedBy"] == "multi-user.target"


def test_agent_environment_file_matches_the_unit():
    from agent.config import build_config
    from agent.options import parse_args

    env = Path(__file__).resolve().parents[2] / "configs" / "agent" / "orch-agent.env"
    lines = [ln for ln in env.read_text().splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    assert lines and all(ln.startswith("ORCH_AGENT_ARGS=") for ln in lines), lines
    args = lines[-1].split("=", 1)[1].strip().strip('"').split()
    parsed = parse_args(args)  # every flag in the example is valid ...
    assert parsed.deprecation_warnings == ()  # ... and none is deprecated
    assert parsed.values["config"] == "/etc/orch/agent/config.yaml"
    # The installed config is the example next to the env file.
    example = env.parent / "config.yaml"
    cfg = build_config(
        parse_args(
            [
                a if not a.startswith("--config=") else f"--config={example}"
                for a in args
                if not a.startswith("--lock-file=") and a != "--exit-on-lock-contention"
            ]
        )
    )
    assert cfg.container_runtime_endpoint.startswith("unix://")
