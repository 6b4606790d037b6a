#!/usr/bin/env bash
# Install orch (orch-agent, orch-apiserver) without dpkg: a virtual environment under
# /opt/orch/venv holding the orch wheel and its dependencies, the systemd units, and the
# default configuration under /etc/orch. packaging/build-deb.sh stages the .deb with it.
#
#   packaging/install.sh [options]            (as root, from a checkout)
#
# Options:
#   --wheel FILE       install this wheel instead of building one from the checkout
#   --wheel-dir DIR    where the built wheel is kept (default: a temporary directory)
#   --python PY        base interpreter, >= 3.11 with venv support (default: the versioned
#                      /usr/bin/python3.X behind /usr/bin/python3, else python3 on PATH)
#   --prefix DIR       installation prefix (default /opt/orch; the venv is DIR/venv)
#   --destdir DIR      stage everything below DIR instead of / (for packaging)
#   --unit-dir DIR     systemd units (default /etc/systemd/system)
#   --bin-dir DIR      symlinks to the two daemons (default /usr/local/bin; '' for none)
#   --force-config     overwrite existing files in /etc/orch (default: keep them)
#   --no-systemctl     do not run 'systemctl daemon-reload'
#
# Relocatable launchers. A venv records absolute paths: console scripts start with
# '#!<venv>/bin/python', and bin/python is a symlink to the base interpreter. With
# --destdir the venv is built at DESTDIR/PREFIX/venv, so those paths would name the
# staging directory. Instead of patching in the final path, every script in bin/ gets
# a shebang that finds the interpreter next to the (symlink-resolved) script:
#     #!/bin/sh
#     '''exec' "$(dirname -- "$(readlink -f -- "$0")")/python" "$0" "$@"
#     ' '''
# (sh runs the exec line; Python reads the two lines as a string literal and goes on.)
# Python locates the venv from the path it was started as (bin/python next to
# ../pyvenv.cfg), not from where the symlink points, so the venv works wherever it
# sits: at /opt/orch/venv after 'dpkg -i', or inside a tree unpacked with
# 'dpkg-deb -x'. The only absolute path left is the base interpreter (pyvenv.cfg
# 'home', the bin/python symlink), which the package depends on. Bytecode is compiled
# with the staging prefix stripped, so tracebacks name the installed paths.
set -euo pipefail

say() { printf 'orch install: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
wheel="" wheel_dir="" python="" prefix="/opt/orch" destdir="" unit_dir="/etc/systemd/system"
bin_dir="/usr/local/bin" force_config=0 systemctl=1

while (($#)); do
    case "$1" in
        --wheel) wheel="$2"; shift 2 ;;
        --wheel-dir) wheel_dir="$2"; shift 2 ;;
        --python) python="$2"; shift 2 ;;
        --prefix) prefix="$2"; shift 2 ;;
        --destdir) destdir="$2"; shift 2 ;;
        --unit-dir) unit_dir="$2"; shift 2 ;;
        --bin-dir) bin_dir="$2"; shift 2 ;;
        --force-config) force_config=1; shift ;;
        --no-systemctl) systemctl=0; shift ;;
        -h|--help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown option $1 (see --help)" ;;
    esac
done

[[ "$prefix" == /* ]] || die "--prefix must be absolute: $prefix"
[[ -z "$destdir" || "$destdir" == /* ]] || destdir="$(pwd -P)/$destdir"
destdir="${destdir%/}"
if [[ -z "$destdir" && $(id -u) -ne 0 ]]; then
    die "installing into / needs root (or use --destdir to stage elsewhere)"
fi

python_ok() {  # $1: interpreter; true if >= 3.11 and able to create a venv with pip
    "$1" -c 'import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 11))' >/dev/null 2>&1
}

if [[ -z "$python" ]]; then
    for candidate in /usr/bin/python3 python3 python3.13 python3.12 python3.11; do
        if command -v "$candidate" >/dev/null 2>&1 && python_ok "$candidate"; then
            python="$(command -v "$candidate")"
            break
        fi
    done
    [[ -n "$python" ]] || die "no python3 >= 3.11 with venv support (Debian: apt-get install python3-venv)"
    # Pin the minor version: /usr/bin/python3 may later point at a newer Python whose
    # ABI the compiled dependencies do not match.
    versioned="$(dirname "$python")/python$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
    [[ -x "$versioned" ]] && python="$versioned"
fi
python_ok "$python" || die "$python is not a Python >= 3.11 with venv support"

venv_final="$prefix/venv"
venv="$destdir$venv_final"
work="$(mktemp -d /tmp/orch-install.XXXXXX)"
trap 'rm -rf "$work"' EXIT

# --- the virtual environment -----------------------------------------------------------
say "creating the virtual environment $venv_final${destdir:+ (staged in $destdir)} with $python ..."
mkdir -p "$(dirname "$venv")"
"$python" -m venv --clear "$venv"
pip=("$venv/bin/python" -m pip --disable-pip-version-check -q)

if [[ -z "$wheel" ]]; then
    # Build from a clean copy: no build/ or egg-info droppings in the checkout.
    mkdir -p "$work/src"
    tar -C "$repo_root" --exclude=__pycache__ --exclude='*.pyc' -cf - pyproject.toml README.md agent apiserver_min cri |
        tar -C "$work/src" -xf -
    out="${wheel_dir:-$work/dist}"
    mkdir -p "$out"
    say "building the orch wheel ..."
    "${pip[@]}" wheel --no-deps -w "$out" "$work/src" </dev/null
    wheel="$(ls -t "$out"/orch-*.whl | head -n1)"
fi
[[ -f "$wheel" ]] || die "no such wheel: $wheel"
say "installing $(basename "$wheel") and its dependencies ..."
"${pip[@]}" install --no-compile "$wheel" </dev/null

# --- relocation ------------------------------------------------------------------------
for script in "$venv"/bin/*; do
    [[ -f "$script" && ! -L "$script" ]] || continue
    first="$(head -c 512 "$script" | head -n1 || true)"
    if [[ "$first" == "#!$venv/bin/python"* ]]; then
        {
            printf '#!/bin/sh\n'
            printf '%s\n' "'''exec' \"\$(dirname -- \"\$(readlink -f -- \"\$0\")\")/python\" \"\$0\" \"\$@\""
            printf "%s\n" "' '''"
            tail -n +2 "$script"
        } >"$script.new"
        chmod 0755 "$script.new"
        mv "$script.new" "$script"
    fi
done
if [[ -n "$destdir" ]]; then
    # Text files that name the staging path: the activate scripts and pyvenv.cfg's 'command'.
    grep -rIl --null -F -- "$destdir" "$venv" 2>/dev/null | xargs -0 -r sed -i "s#$destdir##g"
    # PEP 610 metadata records the temporary wheel path; it means nothing once installed.
    find "$venv" -path '*.dist-info/direct_url.json' -delete
    find "$venv" -path '*.dist-info/RECORD' -exec sed -i '/direct_url.json/d' {} +
fi
# Bytecode: drop what pip's own run left behind, compile everything with the final paths.
find "$venv" -name __pycache__ -type d -prune -exec rm -rf {} +
compile=("$venv/bin/python" -m compileall -q -j 0 --invalidation-mode checked-hash)
[[ -n "$destdir" ]] && compile+=(-s "$destdir" -p /)
"${compile[@]}" "$venv/lib" >/dev/null || die "compiling the bytecode failed"
if [[ -n "$destdir" ]] && leftovers="$(grep -rIl -F -- "$destdir" "$venv")"; then
    die "files still name the staging directory: $leftovers"
fi

# --- units, configuration, examples ---------------------------------------------------
install -d "$destdir$unit_dir"
for unit in "$repo_root"/systemd/*.service; do
    sed "s#/opt/orch/venv/#$venv_final/#g" "$unit" >"$destdir$unit_dir/$(basename "$unit")"
    chmod 0644 "$destdir$unit_dir/$(basename "$unit")"
done

install_config() {  # $1: source, $2: installed path; existing files are kept unless --force-config
    local target="$destdir$2"
    if [[ -e "$target" && $force_config -eq 0 ]]; then
        say "keeping $2 (--force-config replaces it)"
        return 0
    fi
    install -D -m 0644 "$1" "$target"
}
install_config "$repo_root/configs/agent/orch-agent.env" /etc/orch/orch-agent.env
install_config "$repo_root/configs/agent/config.yaml" /etc/orch/agent/config.yaml
[[ -f "$repo_root/configs/apiserver.env" ]] &&
    install_config "$repo_root/configs/apiserver.env" /etc/orch/orch-apiserver.env
install -d -m 0755 "$destdir/etc/orch/agent/manifests"

# Every example (manifests, connection configs) for reference, never live.
install -d "$destdir$prefix/share"
rm -rf "$destdir$prefix/share/configs"
cp -R "$repo_root/configs" "$destdir$prefix/share/configs"
find "$destdir$prefix/share/configs" -type d -exec chmod 0755 {} + -o -type f -exec chmod 0644 {} +

if [[ -n "$bin_dir" ]]; then
    install -d "$destdir$bin_dir"
    for daemon in orch-agent orch-apiserver; do
        # Relative, so the link also works inside an unpacked tree.
        ln -sfn "$(realpath -m --relative-to="$bin_dir" "$venv_final/bin/$daemon")" "$destdir$bin_dir/$daemon"
    done
fi

version="$("$venv/bin/orch-agent" --version)"
say "installed $version and $("$venv/bin/orch-apiserver" --version) in $venv_final${destdir:+ (staged in $destdir)}"
if [[ -z "$destdir" && $systemctl -eq 1 ]] && command -v systemctl >/dev/null 2>&1 && [[ -d /run/systemd/system ]]; then
    systemctl daemon-reload
    say "next: edit /etc/orch/agent/config.yaml and /etc/orch/orch-agent.env, then"
    say "      systemctl enable --now orch-agent   (and orch-apiserver on the control plane)"
fi
