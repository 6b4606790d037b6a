#!/usr/bin/env bash
# The project's single test command:
#   tests/run.sh [pytest args...]
# On a fresh Debian 12 machine (as root) it installs the system packages the e2e
# tests need, creates .venv, installs the project, then runs pytest. Later runs
# skip apt and pip unless something is missing or pyproject.toml changed. Before pytest
# it runs ruff and mypy (ORCH_SKIP_LINT=1 skips them outside CI).
set -euo pipefail

caller_dir="$(pwd -P)"
cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo_root="$(pwd -P)"

say() { printf 'orch tests: %s\n' "$*" >&2; }

# runc lives in /usr/sbin, which a non-login root shell may not have on PATH.
case ":$PATH:" in *:/usr/sbin:*) ;; *) PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"; export PATH ;; esac

apt_packages=(containerd runc containernetworking-plugins busybox-static etcd-server etcd-client wrk nftables dbus)
venv_python="$repo_root/.venv/bin/python"
stamp="$repo_root/.venv/.orch-pyproject.sha256"

python_ok() {  # $1: interpreter; true if >= 3.11 and able to create a venv with pip
    "$1" -c 'import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 11))' >/dev/null 2>&1
}

find_python() {
    local candidate
    for candidate in python3 python3.13 python3.12 python3.11; do
        if command -v "$candidate" >/dev/null 2>&1 && python_ok "$candidate"; then
            command -v "$candidate"
            return 0
        fi
    done
    return 1
}

venv_ok() {
    [[ -x "$venv_python" ]] &&
        "$venv_python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' >/dev/null 2>&1
}

# --- system packages ---------------------------------------------------------
wanted=("${apt_packages[@]}")
if ! venv_ok && ! find_python >/dev/null; then
    # Debian's python3 creates venvs only with python3-venv (ensurepip).
    wanted+=(python3 python3-venv)
fi
# The protobuf decoder's C extension needs a compiler and the interpreter's headers
# (Debian's python3-dev for Debian's python3; other interpreters ship their own).
command -v gcc >/dev/null 2>&1 || wanted+=(gcc)
for candidate in "$venv_python" "$(find_python 2>/dev/null || true)"; do
    [[ -n "$candidate" && -x "$candidate" ]] || continue
    include="$("$candidate" -c 'import sysconfig; print(sysconfig.get_paths()["include"])' 2>/dev/null || true)"
    if [[ -n "$include" && ! -f "$include/Python.h" && "$include" == /usr/include/* ]]; then
        wanted+=(python3-dev)
    fi
    break
done
missing=()
for pkg in "${wanted[@]}"; do
    # No `dpkg -s | grep -q`: grep's early exit makes dpkg die of SIGPIPE, which
    # pipefail reports as failure.
    if [[ "$(dpkg -s "$pkg" 2>/dev/null || true)" != *$'\nStatus: install ok installed\n'* ]]; then
        missing+=("$pkg")
    fi
done
if ((${#missing[@]})); then
    if [[ $(id -u) -ne 0 ]]; then
        say "missing apt packages: ${missing[*]} (not root: not installing; tests that need them will skip)"
    else
        say "installing apt packages: ${missing[*]} ..."
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq </dev/null
        # The full list, so that one command line reproduces the environment.
        apt-get install -y -qq "${wanted[@]}" </dev/null >/dev/null
    fi
fi

# --- virtual environment -----------------------------------------------------
if ! venv_ok; then
    python="$(find_python)" || { say "no python3 >= 3.11 with venv support found"; exit 1; }
    say "creating .venv with $python ($("$python" -c 'import platform; print(platform.python_version())')) ..."
    "$python" -m venv --clear "$repo_root/.venv"
    rm -f "$stamp"
fi

# Re-installed when pyproject.toml or the C extension's source changes (the
# editable install compiles apiserver_min/api/_pbfast.c in place).
want_hash="$(cat pyproject.toml apiserver_min/api/_pbfast.c | sha256sum | cut -d' ' -f1)"
have_hash="$(cat "$stamp" 2>/dev/null || true)"
if [[ "$want_hash" != "$have_hash" ]]; then
    say "installing the project into .venv (pip install -e '.[test]') ..."
    "$venv_python" -m pip install --disable-pip-version-check -q -e '.[test]' </dev/null
    printf '%s\n' "$want_hash" >"$stamp"
fi

# --- lint and type checks ---------------------------------------------------
# ruff and mypy as configured in pyproject.toml (mypy keeps its cache in .mypy_cache,
# so a second run takes about a second). ORCH_SKIP_LINT=1 skips them for a quick local
# run; CI (CI=true) always runs them.
lint_step() {  # $1: the step's name; the rest: its command
    local name="$1"
    shift
    if ! "$@"; then
        say "FAILED: $name (see above; ORCH_SKIP_LINT=1 skips the lint steps locally)"
        exit 1
    fi
}
if [[ "${ORCH_SKIP_LINT:-}" == 1 && "${CI:-}" != true ]]; then
    say "skipping ruff and mypy (ORCH_SKIP_LINT=1)"
else
    say "running ruff check, ruff format --check and mypy"
    lint_step "ruff check" "$venv_python" -m ruff check --quiet .
    lint_step "ruff format --check" "$venv_python" -m ruff format --check --quiet .
    lint_step "mypy" "$venv_python" -m mypy
fi

# --- tests -------------------------------------------------------------------
# Paths given relative to the caller's directory still name the same files after
# the cd above (`tests/run.sh e2e/test_x.py::test_y` from tests/ works). Values
# of -k/-m/-p/-o/-W are expressions, never paths.
args=()
prev=""
for arg in "$@"; do
    path="${arg%%::*}"
    if [[ "$caller_dir" != "$repo_root" && "$arg" != -* && "$path" != /* && -n "$path" &&
          ! "$prev" =~ ^-[kmpoW]$ && -e "$caller_dir/$path" && ! -e "$repo_root/$path" ]]; then
        arg="$caller_dir/$arg"
    fi
    args+=("$arg")
    prev="$arg"
done
# Two workers by default (ORCH_TEST_WORKERS=N to change, 0 for none; an explicit -n,
# --numprocesses, -p no:xdist or --pdb wins): see tests/conftest.py for which tests
# share one worker because they use the host's shared parts.
workers="${ORCH_TEST_WORKERS:-2}"
for arg in "${args[@]}"; do
    case "$arg" in
        -n | -n* | --numprocesses* | no:xdist | --pdb | --trace) workers="" ;;
    esac
done
if [[ -n "$workers" && "$workers" != 0 ]]; then
    args=(-n "$workers" --dist loadscope "${args[@]}")
fi
say "running pytest ${args[*]}"
exec "$venv_python" -m pytest "${args[@]}"
