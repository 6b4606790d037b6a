#!/usr/bin/env bash
# Build the orch wheel and a Debian package of both daemons with dpkg-deb.
#
#   packaging/build-deb.sh [--out DIR] [--compress xz|gzip|zstd|none] [--python PY]
#
# Output in DIR (default dist/ in the checkout): orch-<version>-py3-none-any.whl and
# orch_<version>_<arch>.deb. The package holds:
#   /opt/orch/venv                     a venv with the wheel and all its dependencies
#   /opt/orch/share/configs            every example config and manifest
#   /lib/systemd/system/orch-agent.service, orch-apiserver.service
#   /etc/orch/orch-agent.env, orch-apiserver.env, agent/config.yaml (conffiles),
#   /etc/orch/agent/manifests/         the static pod directory (empty)
#   /usr/bin/orch-agent, orch-apiserver  relative symlinks into the venv
#
# The tree is staged with packaging/install.sh --destdir, which builds the venv inside
# the staging directory and makes its launchers relocatable (see the comment there), so
# the daemons run from /opt/orch after 'dpkg -i' and equally from a tree unpacked with
# 'dpkg-deb -x' anywhere. The venv's interpreter is the build machine's versioned
# /usr/bin/python3.X, which the package depends on; compiled dependencies (grpcio,
# cryptography, orjson, uvloop) make it architecture-specific.
#
# No root needed: dpkg-deb --root-owner-group makes every file root-owned in the archive.
set -euo pipefail

say() { printf 'orch build-deb: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
out="$repo_root/dist" compress="xz" python=""
while (($#)); do
    case "$1" in
        --out) out="$2"; shift 2 ;;
        --compress) compress="$2"; shift 2 ;;
        --python) python="$2"; shift 2 ;;
        -h|--help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown option $1 (see --help)" ;;
    esac
done
command -v dpkg-deb >/dev/null || die "dpkg-deb is missing (Debian package dpkg)"
mkdir -p "$out"
out="$(cd "$out" && pwd -P)"

version="$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' "$repo_root/apiserver_min/version.py")"
[[ -n "$version" ]] || die "cannot read the version from apiserver_min/version.py"
arch="$(dpkg --print-architecture 2>/dev/null || echo amd64)"
work="$(mktemp -d /tmp/orch-deb.XXXXXX)"
trap 'rm -rf "$work"' EXIT
stage="$work/root"

rm -f "$out"/orch-"$version"-*.whl
install_args=(--destdir "$stage" --prefix /opt/orch --unit-dir /lib/systemd/system --bin-dir /usr/bin
              --wheel-dir "$out" --force-config --no-systemctl)
[[ -n "$python" ]] && install_args+=(--python "$python")
"$repo_root/packaging/install.sh" "${install_args[@]}"

# The interpreter the venv was made with, for Depends.
base="$(readlink "$stage/opt/orch/venv/bin/python")"
[[ "$base" == /* ]] || base="$(sed -n 's/^executable = //p' "$stage/opt/orch/venv/pyvenv.cfg")"
pyver="$("$base" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"

install -d -m 0755 "$stage/DEBIAN"
installed_size="$(du -sk --exclude=DEBIAN "$stage" | cut -f1)"
cat >"$stage/DEBIAN/control" <<EOF
Package: orch
Version: $version
Architecture: $arch
Maintainer: orch developers <orch@localhost>
Installed-Size: $installed_size
Depends: python$pyver, libc6
Recommends: containerd, runc, containernetworking-plugins
Section: admin
Priority: optional
Homepage: https://orch.invalid/
Description: orch node agent and minimal control plane
 orch-agent runs pods from static manifests, a manifest URL or the API server
 on containerd over CRI; orch-apiserver is a control plane serving the
 resource API on SQLite or etcd. Both live in a Python virtual environment
 under /opt/orch/venv and come with systemd units (orch-agent.service,
 orch-apiserver.service) and default configuration in /etc/orch.
EOF
(cd "$stage" && find etc -type f | sort | sed 's#^#/#') >"$stage/DEBIAN/conffiles"
cat >"$stage/DEBIAN/postinst" <<'EOF'
#!/bin/sh
set -e
if [ "$1" = configure ] && [ -d /run/systemd/system ]; then
    systemctl daemon-reload >/dev/null || true
fi
exit 0
EOF
cat >"$stage/DEBIAN/prerm" <<'EOF'
#!/bin/sh
set -e
# Stopping the agent leaves the containers running (KillMode=process).
if [ "$1" = remove ] && [ -d /run/systemd/system ]; then
    systemctl stop orch-agent.service orch-apiserver.service >/dev/null 2>&1 || true
fi
exit 0
EOF
cat >"$stage/DEBIAN/postrm" <<'EOF'
#!/bin/sh
set -e
if [ -d /run/systemd/system ]; then
    systemctl daemon-reload >/dev/null 2>&1 || true
fi
if [ "$1" = purge ]; then
    rm -rf /opt/orch/venv
fi
exit 0
EOF
chmod 0755 "$stage/DEBIAN/postinst" "$stage/DEBIAN/prerm" "$stage/DEBIAN/postrm"

deb="$out/orch_${version}_${arch}.deb"
say "building $deb ($compress) ..."
dpkg-deb --root-owner-group -Z"$compress" --build "$stage" "$deb" >/dev/null
say "built $(basename "$(ls "$out"/orch-"$version"-*.whl)") and $(basename "$deb") in $out"
printf '%s\n' "$deb"
