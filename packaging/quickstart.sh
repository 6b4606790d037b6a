#!/usr/bin/env bash
# orch quickstart: install what orch needs and start it on this machine (as root).
#
#   packaging/quickstart.sh          install if needed, start, create the demo pod
#   packaging/quickstart.sh status   is it running, is it ready
#   packaging/quickstart.sh stop     stop what start started (by its PID file)
#
# For now "the main job" is the API server on SQLite; the node agent that joins
# it and runs pods on containerd comes with later work, so the demo pod stays
# Pending. Re-running is safe: installed parts are kept, a running server is
# left alone.
#
# Settings (environment variables):
#   ORCH_DATA_DIR      API server data dir      (default /var/lib/orch-apiserver)
#   ORCH_PORT          API server secure port   (default 6443)
#   ORCH_BIND_ADDRESS  address to listen on     (default 127.0.0.1)
#   ORCH_VENV          where orch is installed  (default /opt/orch/venv)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo_root="$(pwd -P)"

data_dir="${ORCH_DATA_DIR:-/var/lib/orch-apiserver}"
port="${ORCH_PORT:-6443}"
bind_address="${ORCH_BIND_ADDRESS:-127.0.0.1}"
venv="${ORCH_VENV:-/opt/orch/venv}"
log_dir=/var/log/orch
run_dir=/run/orch
log_file="$log_dir/orch-apiserver.log"
pid_file="$run_dir/orch-apiserver.pid"
admin_config="$data_dir/admin.orchconfig"
demo_pod="$repo_root/configs/examples/demo-pod.yaml"
apiserver_bin="$venv/bin/orch-apiserver"
apt_packages=(containerd runc containernetworking-plugins busybox-static etcd-server curl)

# runc lives in /usr/sbin, which a non-login root shell may not have on PATH.
case ":$PATH:" in *:/usr/sbin:*) ;; *) PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"; export PATH ;; esac

say() { printf 'orch quickstart: %s\n' "$*"; }
die() { printf 'orch quickstart: error: %s\n' "$*" >&2; exit 1; }

case "$bind_address" in
    0.0.0.0 | "") connect_host=127.0.0.1 ;;
    ::) connect_host="[::1]" ;;
    *:*) connect_host="[$bind_address]" ;;
    *) connect_host="$bind_address" ;;
esac
server_url="https://$connect_host:$port"

# --- the server process, known only by its PID file ----------------------------------------

running_pid() {  # prints the PID and succeeds if the PID file names a live orch-apiserver
    local pid cmdline
    [[ -r "$pid_file" ]] || return 1
    pid="$(tr -dc '0-9' <"$pid_file")"
    [[ -n "$pid" && -r "/proc/$pid/cmdline" ]] || return 1
    # The PID may have been reused by an unrelated process since: check what it runs.
    cmdline="$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null || true)"
    [[ "$cmdline" == *orch-apiserver* ]] || return 1
    printf '%s\n' "$pid"
}

# --- talking to the server with the admin client certificate -------------------------------

client_dir=""
cleanup() { [[ -z "$client_dir" ]] || rm -rf "$client_dir"; }
trap cleanup EXIT

extract_client_files() {  # CA, client cert and key from admin.orchconfig into a private temp dir
    # Call it outside $(...): client_dir must be set in this shell, for api() and cleanup.
    [[ -z "$client_dir" ]] || return 0
    local dir
    dir="$(mktemp -d /tmp/orch-quickstart.XXXXXX)"  # mode 0700
    if "$venv/bin/python" - "$admin_config" "$dir" 2>/dev/null <<'PY'
import base64, os, sys, yaml
cfg = yaml.safe_load(open(sys.argv[1]))
cluster, user = cfg["clusters"][0]["cluster"], cfg["users"][0]["user"]
for name, data in (("ca.crt", cluster["certificate-authority-data"]),
                   ("client.crt", user["client-certificate-data"]),
                   ("client.key", user["client-key-data"])):
    fd = os.open(os.path.join(sys.argv[2], name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.write(fd, base64.b64decode(data))
    os.close(fd)
PY
    then
        client_dir="$dir"
    else
        rm -rf "$dir"  # e.g. the file is still being written: the next call tries again
        return 1
    fi
}

api() {  # api METHOD PATH [curl args...]: prints the body, then the HTTP status on the last line
    local method="$1" path="$2"
    shift 2
    curl -sS --max-time 10 -X "$method" --cacert "$client_dir/ca.crt" --cert "$client_dir/client.crt" \
        --key "$client_dir/client.key" -w '\n%{http_code}' "$@" "$server_url$path"
}

ready() {  # succeeds when /readyz answers 200
    [[ -r "$admin_config" && -x "$venv/bin/python" ]] || return 1
    extract_client_files || return 1
    local out
    out="$(api GET /readyz 2>/dev/null)" || return 1
    [[ "${out##*$'\n'}" == 200 ]]
}

# --- install -------------------------------------------------------------------------------

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

install_apt_packages() {
    local wanted=("${apt_packages[@]}") missing=() pkg
    if [[ ! -x "$venv/bin/python" ]] && ! find_python >/dev/null; then
        wanted+=(python3 python3-venv)  # Debian's python3 creates venvs only with python3-venv
    fi
    for pkg in "${wanted[@]}"; do
        # No `dpkg -s | grep -q`: grep's early exit makes dpkg die of SIGPIPE under pipefail.
        if [[ "$(dpkg -s "$pkg" 2>/dev/null || true)" != *$'\nStatus: install ok installed\n'* ]]; then
            missing+=("$pkg")
        fi
    done
    if ((${#missing[@]} == 0)); then
        say "system packages present: ${wanted[*]}"
        return 0
    fi
    say "installing system packages: ${missing[*]} (apt-get update; apt-get install) ..."
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq </dev/null
    apt-get install -y -qq "${missing[@]}" </dev/null >/dev/null
}

source_hash() {  # what the installed copy was built from
    (cd "$repo_root" && find pyproject.toml README.md agent apiserver_min cri -type f \
        -not -path '*/__pycache__/*' -not -name '*.pyc' -print0 2>/dev/null |
        sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1)
}

install_orch() {
    local stamp="$venv/.orch-source.sha256" want have python build_dir
    if [[ ! -x "$venv/bin/python" ]] || ! "$venv/bin/python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
        python="$(find_python)" || die "no python3 >= 3.11 with venv support found"
        say "creating a virtual environment at $venv with $python ..."
        mkdir -p "$(dirname "$venv")"
        "$python" -m venv --clear "$venv"
        rm -f "$stamp"
    fi
    want="$(source_hash)"
    have="$(cat "$stamp" 2>/dev/null || true)"
    if [[ "$want" == "$have" && -x "$apiserver_bin" ]]; then
        say "orch $("$apiserver_bin" --version | awk '{print $2}') already installed in $venv"
        return 0
    fi
    # Build from a clean copy, so that the checkout gets no build/ or egg-info droppings
    # and files deleted from the checkout do not linger in the installed package.
    build_dir="$(mktemp -d /tmp/orch-build.XXXXXX)"
    tar -C "$repo_root" --exclude=__pycache__ --exclude='*.pyc' -cf - pyproject.toml README.md agent apiserver_min cri |
        tar -C "$build_dir" -xf -
    say "installing orch into $venv (pip install $repo_root) ..."
    if ! "$venv/bin/python" -m pip install --disable-pip-version-check -q "$build_dir" </dev/null; then
        rm -rf "$build_dir"
        die "pip install failed (see the messages above)"
    fi
    rm -rf "$build_dir"
    printf '%s\n' "$want" >"$stamp"
    say "installed $("$apiserver_bin" --version) in $venv"
    local pid
    if pid="$(running_pid)"; then
        say "note: the running orch-apiserver (pid $pid) keeps the code it started with;"
        say "      '$0 stop' and then '$0' restart it on the new installation"
    fi
}

# --- start ---------------------------------------------------------------------------------

start_apiserver() {
    local pid i log_start
    if pid="$(running_pid)"; then
        say "orch-apiserver is already running (pid $pid); not starting another"
        return 0
    fi
    rm -f "$pid_file"
    mkdir -p "$log_dir" "$run_dir"
    mkdir -p -m 0700 "$data_dir"
    local args=(--data-dir "$data_dir" --bind-address "$bind_address" --secure-port "$port")
    say "starting: $apiserver_bin ${args[*]}"
    say "  (in the background; log: $log_file, pid file: $pid_file)"
    printf '\n=== %s orch quickstart: starting orch-apiserver %s\n' "$(date -Is)" "${args[*]}" >>"$log_file"
    log_start="$(stat -c %s "$log_file")"  # show only this start's lines on failure
    # setsid: its own session, so that it outlives this shell and its terminal. A
    # background job is no process-group leader, so setsid execs without forking and
    # $! is the server's own PID.
    setsid "$apiserver_bin" "${args[@]}" </dev/null >>"$log_file" 2>&1 &
    pid=$!
    printf '%s\n' "$pid" >"$pid_file"
    say "waiting for $server_url/readyz ..."
    for ((i = 0; i < 120; i++)); do
        if ! kill -0 "$pid" 2>/dev/null; then
            rm -f "$pid_file"
            say "orch-apiserver exited during start-up; the end of $log_file:"
            tail -c "+$((log_start + 1))" "$log_file" | tail -n 20 | sed 's/^/    /'
            die "orch-apiserver did not start"
        fi
        if ready; then
            say "orch-apiserver is ready (pid $pid)"
            return 0
        fi
        sleep 0.5
    done
    say "the end of $log_file:"
    tail -c "+$((log_start + 1))" "$log_file" | tail -n 20 | sed 's/^/    /'
    die "orch-apiserver (pid $pid) is not ready after 60s; it is still running: '$0 stop' stops it"
}

create_demo_pod() {
    local out code
    if command -v kubectl >/dev/null 2>&1; then
        say "creating the demo pod: kubectl --kubeconfig $admin_config apply -f configs/examples/demo-pod.yaml"
        if ! out="$(kubectl --kubeconfig "$admin_config" apply -f "$demo_pod" 2>&1)"; then
            printf '%s\n' "$out" | sed 's/^/    /'
            die "kubectl apply failed"
        fi
        printf '%s\n' "$out" | sed 's/^/    /'
    else
        say "kubectl not found; creating the demo pod with curl (POST /api/v1/namespaces/default/pods)"
        extract_client_files || die "cannot read the admin client certificate from $admin_config"
        out="$(api POST /api/v1/namespaces/default/pods -H 'Content-Type: application/yaml' \
            --data-binary "@$demo_pod")" || die "could not reach the API server"
        code="${out##*$'\n'}"
        case "$code" in
            201) say "    pod/demo created" ;;
            409) say "    pod/demo already exists" ;;
            *) printf '%s\n' "${out%$'\n'*}" | sed 's/^/    /'; die "creating the demo pod failed (HTTP $code)" ;;
        esac
    fi
}

cmd_start() {
    [[ $(id -u) -eq 0 ]] || die "run this as root (it installs packages and writes under /opt, /var and /run)"
    [[ "$port" =~ ^[0-9]+$ ]] || die "ORCH_PORT must be a port number, not '$port'"
    install_apt_packages
    install_orch
    start_apiserver
    create_demo_pod
    cat <<EOF

orch is running.
  Started:    orch-apiserver (the control plane) on $server_url, storage SQLite in $data_dir,
              pid $(running_pid || echo '?') (pid file $pid_file).
  Use it:     kubectl --kubeconfig $admin_config get ns
              kubectl --kubeconfig $admin_config get pods
  Logs:       $log_file
  Status:     $0 status
  Stop it:    $0 stop

Not yet implemented: the node agent (orch-agent) joining the cluster and running pods on
containerd. Until it is, pods are stored by the API server but nothing runs them, so the
demo pod stays Pending.
EOF
}

cmd_stop() {
    local pid i
    if ! pid="$(running_pid)"; then
        rm -f "$pid_file" 2>/dev/null || true
        say "orch-apiserver is not running (no live process in $pid_file); nothing to stop"
        return 0
    fi
    say "stopping orch-apiserver (pid $pid, SIGTERM) ..."
    kill -TERM "$pid"
    for ((i = 0; i < 300; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        say "still running after 30s; sending SIGKILL to pid $pid"
        kill -KILL "$pid" 2>/dev/null || true
        sleep 0.2
    fi
    rm -f "$pid_file"
    say "stopped. Data stays in $data_dir, the log in $log_file; '$0' starts it again."
}

cmd_status() {
    local pid
    if ! pid="$(running_pid)"; then
        say "orch-apiserver: not running (pid file $pid_file)"
        return 3
    fi
    if ready; then
        say "orch-apiserver: running (pid $pid), ready on $server_url"
    else
        say "orch-apiserver: running (pid $pid), NOT ready on $server_url (see $log_file)"
    fi
    say "  kubectl --kubeconfig $admin_config get ns"
    say "  log: $log_file"
    say "orch-agent: not yet implemented (pods stay Pending)"
}

case "${1:-start}" in
    start) cmd_start ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    -h | --help | help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//' ;;
    *) die "unknown command '$1' (use: start, stop, status)" ;;
esac
