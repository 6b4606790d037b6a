#!/usr/bin/env bash
# orch quickstart: a one-node cluster on this machine (as root).
#
#   packaging/quickstart.sh          install if needed, start, run the demo pods
#   packaging/quickstart.sh status   what is running, node and pod state
#   packaging/quickstart.sh stop     stop the agent, the pods, containerd and the API server
#
# It starts, each in the background with a PID file under /run/orch and a log
# under /var/log/orch:
#   1. orch-apiserver on SQLite (the control plane);
#   2. a containerd of orch's own (its own socket, state and CNI bridge, so that a
#      containerd the machine already runs is left alone), with the local busybox
#      and pause images imported;
#   3. orch-agent, joined to the API server with a fresh bootstrap token
#      (`orch-agent join`; later starts reuse the node's client certificate).
# The agent runs the static pod static-web from the manifest directory and the API
# pod `demo`; the script waits until the node is Ready and both pods run.
# Re-running is safe: installed parts are kept, running daemons are left alone.
#
# Settings (environment variables):
#   ORCH_DATA_DIR        API server data dir          (default /var/lib/orch-apiserver)
#   ORCH_PORT            API server secure port       (default 6443)
#   ORCH_BIND_ADDRESS    API server listen address    (default 127.0.0.1)
#   ORCH_AGENT_ROOT      agent root dir               (default /var/lib/orch-agent)
#   ORCH_AGENT_PORT      agent HTTPS port             (default 10250)
#   ORCH_MANIFEST_DIR    static pod manifests         (default /etc/orch/agent/manifests)
#   ORCH_CONTAINERD_DIR  orch's containerd root       (default /var/lib/orch/containerd)
#   ORCH_CNI_CONF_DIR    CNI network configs          (default /etc/orch/cni/net.d)
#   ORCH_NODE_NAME       the node's name              (default: the host name)
#   ORCH_VENV            where orch is installed      (default /opt/orch/venv)
#   ORCH_RUN_DIR         PID files, containerd state  (default /run/orch)
#   ORCH_LOG_DIR         logs                         (default /var/log/orch)
#   ORCH_AGENT_FLAGS     more orch-agent flags, space-separated (default none)
#   ORCH_WAIT            seconds to wait for the pods (default 180)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo_root="$(pwd -P)"

data_dir="${ORCH_DATA_DIR:-/var/lib/orch-apiserver}"
port="${ORCH_PORT:-6443}"
bind_address="${ORCH_BIND_ADDRESS:-127.0.0.1}"
agent_root="${ORCH_AGENT_ROOT:-/var/lib/orch-agent}"
agent_port="${ORCH_AGENT_PORT:-10250}"
manifest_dir="${ORCH_MANIFEST_DIR:-/etc/orch/agent/manifests}"
containerd_dir="${ORCH_CONTAINERD_DIR:-/var/lib/orch/containerd}"
venv="${ORCH_VENV:-/opt/orch/venv}"
wait_seconds="${ORCH_WAIT:-180}"
read -r -a extra_agent_flags <<<"${ORCH_AGENT_FLAGS:-}"
log_dir="${ORCH_LOG_DIR:-/var/log/orch}"
run_dir="${ORCH_RUN_DIR:-/run/orch}"
containerd_state="$run_dir/containerd"
containerd_socket="$containerd_state/containerd.sock"
cni_conf_dir="${ORCH_CNI_CONF_DIR:-/etc/orch/cni/net.d}"
admin_config="$data_dir/admin.orchconfig"
agent_orchconfig="$agent_root/agent.orchconfig"
demo_pod="$repo_root/configs/examples/demo-pod.yaml"
static_pod="$repo_root/configs/agent/manifests/static-web.yaml"
apiserver_bin="$venv/bin/orch-apiserver"
agent_bin="$venv/bin/orch-agent"
node_name="${ORCH_NODE_NAME:-$(hostname | tr 'A-Z' 'a-z')}"
apt_packages=(containerd runc containernetworking-plugins busybox-static etcd-server curl nftables)

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

# --- daemons, each known only by its PID file ----------------------------------------------

pid_file() { printf '%s/%s.pid\n' "$run_dir" "$1"; }
log_file() { printf '%s/%s.log\n' "$log_dir" "$1"; }

running_pid() {  # running_pid NAME: prints the PID if NAME's PID file names a live NAME process
    local pid cmdline file
    file="$(pid_file "$1")"
    [[ -r "$file" ]] || return 1
    pid="$(tr -dc '0-9' <"$file")"
    [[ -n "$pid" && -r "/proc/$pid/cmdline" ]] || return 1
    # The PID may have been reused by an unrelated process since: check what it runs.
    cmdline="$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null || true)"
    [[ "$cmdline" == *"$1"* ]] || return 1
    printf '%s\n' "$pid"
}

show_log_since() {  # show_log_since NAME OFFSET: the last lines this start wrote
    tail -c "+$(($2 + 1))" "$(log_file "$1")" | tail -n 25 | sed 's/^/    /'
}

spawn() {  # spawn NAME ARGV...: start in its own session, output to the log, PID to the PID file
    local name="$1" log
    shift
    log="$(log_file "$name")"
    mkdir -p "$log_dir" "$run_dir"
    printf '\n=== %s orch quickstart: starting %s\n' "$(date -Is)" "$*" >>"$log"
    spawn_offset="$(stat -c %s "$log")"
    # setsid: its own session, so that it outlives this shell and its terminal. A
    # background job is no process-group leader, so setsid execs without forking and
    # $! is the daemon's own PID.
    setsid "$@" </dev/null >>"$log" 2>&1 &
    spawned_pid=$!
    printf '%s\n' "$spawned_pid" >"$(pid_file "$name")"
}

wait_for() {  # wait_for NAME SECONDS CHECK...: until CHECK succeeds; fails if NAME dies first
    local name="$1" seconds="$2" i pid
    shift 2
    pid="$(tr -dc '0-9' <"$(pid_file "$name")")"
    for ((i = 0; i < seconds * 2; i++)); do
        if ! kill -0 "$pid" 2>/dev/null; then
            rm -f "$(pid_file "$name")"
            say "$name exited during start-up; the end of $(log_file "$name"):"
            show_log_since "$name" "$spawn_offset"
            die "$name did not start"
        fi
        if "$@"; then
            return 0
        fi
        sleep 0.5
    done
    say "the end of $(log_file "$name"):"
    show_log_since "$name" "$spawn_offset"
    die "$name (pid $pid) is not ready after ${seconds}s; it is still running: '$0 stop' stops everything"
}

stop_daemon() {  # stop_daemon NAME SECONDS: SIGTERM, then SIGKILL after SECONDS
    local name="$1" seconds="$2" pid i
    if ! pid="$(running_pid "$name")"; then
        rm -f "$(pid_file "$name")" 2>/dev/null || true
        say "$name is not running"
        return 0
    fi
    say "stopping $name (pid $pid, SIGTERM) ..."
    kill -TERM "$pid"
    for ((i = 0; i < seconds * 10; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        say "$name still running after ${seconds}s; sending SIGKILL to pid $pid"
        kill -KILL "$pid" 2>/dev/null || true
        sleep 0.2
    fi
    rm -f "$(pid_file "$name")"
}

# --- talking to the API server with the admin client certificate ---------------------------

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

api_ready() {  # succeeds when /readyz answers 200
    [[ -r "$admin_config" && -x "$venv/bin/python" ]] || return 1
    extract_client_files || return 1
    local out
    out="$(api GET /readyz 2>/dev/null)" || return 1
    [[ "${out##*$'\n'}" == 200 ]]
}

# Reads an object's JSON on stdin and prints one fact about it.
object_fact() {  # object_fact node-ready | pod-phase | pod-ip
    "$venv/bin/python" -c '
import json, sys
what = sys.argv[1]
try:
    obj = json.load(sys.stdin)
except ValueError:
    sys.exit(0)
if what == "node-ready":
    for c in obj.get("status", {}).get("conditions", []):
        if c.get("type") == "Ready":
            print(c.get("status", ""))
elif what == "pod-phase":
    print(obj.get("status", {}).get("phase", ""))
elif what == "pod-ip":
    print(obj.get("status", {}).get("podIP", ""))
' "$1"
}

get_fact() {  # get_fact PATH FACT: prints the fact, or nothing when the object is not there
    local out
    extract_client_files || return 0
    out="$(api GET "$1" 2>/dev/null)" || return 0
    [[ "${out##*$'\n'}" == 200 ]] || return 0
    printf '%s\n' "${out%$'\n'*}" | object_fact "$2"
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
        -not -path '*/__pycache__/*' -not -name '*.pyc' -not -name '*.so' -print0 2>/dev/null |
        sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1)
}

install_orch() {
    local stamp="$venv/.orch-source.sha256" want have python build_dir name pid
    if [[ ! -x "$venv/bin/python" ]] || ! "$venv/bin/python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
        python="$(find_python)" || die "no python3 >= 3.11 with venv support found"
        say "creating a virtual environment at $venv with $python ..."
        mkdir -p "$(dirname "$venv")"
        "$python" -m venv --clear "$venv"
        rm -f "$stamp"
    fi
    want="$(source_hash)"
    have="$(cat "$stamp" 2>/dev/null || true)"
    if [[ "$want" == "$have" && -x "$apiserver_bin" && -x "$agent_bin" ]]; then
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
    for name in orch-apiserver orch-agent; do
        if pid="$(running_pid "$name")"; then
            say "note: the running $name (pid $pid) keeps the code it started with;"
            say "      '$0 stop' and then '$0' restart it on the new installation"
        fi
    done
}

# --- 1. the API server ---------------------------------------------------------------------

start_apiserver() {
    local pid
    if pid="$(running_pid orch-apiserver)"; then
        say "orch-apiserver is already running (pid $pid); not starting another"
        wait_for orch-apiserver 60 api_ready
        return 0
    fi
    mkdir -p -m 0700 "$data_dir"
    local args=(--data-dir "$data_dir" --bind-address "$bind_address" --secure-port "$port"
                --enable-bootstrap-token-auth)
    say "starting: $apiserver_bin ${args[*]}"
    spawn orch-apiserver "$apiserver_bin" "${args[@]}"
    say "  pid $spawned_pid, log $(log_file orch-apiserver); waiting for $server_url/readyz ..."
    wait_for orch-apiserver 60 api_ready
    say "orch-apiserver is ready"
}

# --- 2. containerd -------------------------------------------------------------------------

containerd_ready() {
    [[ -S "$containerd_socket" ]] && ctr --address "$containerd_socket" version >/dev/null 2>&1
}

write_containerd_config() {
    mkdir -p "$containerd_dir" "$containerd_state" "$cni_conf_dir"
    # One network config: orch's bridge. A user's own conflist in that directory is kept.
    if [[ ! -e "$cni_conf_dir/10-orch-bridge.conflist" ]]; then
        cp "$repo_root/packaging/cni/10-orch-bridge.conflist" "$cni_conf_dir/"
    fi
    "$venv/bin/python" - "$repo_root/packaging/containerd/config.toml.in" "$containerd_dir/config.toml" \
        "$containerd_dir" "$containerd_state" "$cni_conf_dir" <<'PY'
import os, string, sys
template, out, root, state, cni_conf = sys.argv[1:]
text = string.Template(open(template).read()).substitute(
    root=f"{root}/root", state=state, grpc_address=f"{state}/containerd.sock",
    ttrpc_address=f"{state}/containerd.ttrpc.sock", debug_address=f"{state}/containerd.debug.sock",
    log_level="info", opt_path=f"{root}/opt", runc_root=f"{state}/runc",
    sandbox_image="orch.local/pause:1", stream_server_address="127.0.0.1", stream_server_port="0",
    cni_bin_dir="/usr/lib/cni", cni_conf_dir=cni_conf)
tmp = out + ".tmp"
with open(tmp, "w") as f:
    f.write(text)
os.replace(tmp, out)
PY
}

start_containerd() {
    local pid
    if pid="$(running_pid containerd)"; then
        say "orch's containerd is already running (pid $pid); not starting another"
    else
        write_containerd_config
        say "starting: containerd --config $containerd_dir/config.toml (socket $containerd_socket)"
        spawn containerd containerd --config "$containerd_dir/config.toml"
        say "  pid $spawned_pid, log $(log_file containerd)"
        wait_for containerd 30 containerd_ready
        say "containerd is ready"
    fi
    say "building and importing the local images (orch.local/busybox:1, orch.local/pause:1) ..."
    "$venv/bin/python" "$repo_root/packaging/images/build.py" --import "$containerd_socket" |
        sed 's/^/    /' || die "building or importing the images failed"
}

# --- 3. the agent --------------------------------------------------------------------------

agent_args() {
    local args=(--root-dir "$agent_root" --pod-manifest-path "$manifest_dir"
                --container-runtime-endpoint "unix://$containerd_socket"
                --port "$agent_port" --read-only-port 0 --hostname-override "$node_name")
    # The agent refuses to start with swap on unless told otherwise (as upstream does).
    if [[ -n "$(swapon --noheadings 2>/dev/null || true)" ]]; then
        args+=(--fail-swap-on=false)
    fi
    args+=("${extra_agent_flags[@]}")
    printf '%s\n' "${args[@]}"
}

node_ready() { [[ "$(get_fact "/api/v1/nodes/$node_name" node-ready)" == True ]]; }

start_agent() {
    local pid args join
    if pid="$(running_pid orch-agent)"; then
        say "orch-agent is already running (pid $pid); not starting another"
        wait_for orch-agent 60 node_ready
        return 0
    fi
    mkdir -p "$manifest_dir"
    if [[ ! -e "$manifest_dir/static-web.yaml" ]]; then
        cp "$static_pod" "$manifest_dir/static-web.yaml"
        say "wrote the static pod manifest $manifest_dir/static-web.yaml"
    fi
    mapfile -t args < <(agent_args)
    if [[ -s "$agent_orchconfig" ]]; then
        # Joined before: the node's client certificate is reused (and renewed with the
        # bootstrap config if it has expired).
        args+=(--orchconfig "$agent_orchconfig" --bootstrap-orchconfig "$agent_root/bootstrap-agent.orchconfig")
        say "starting: $agent_bin ${args[*]}"
        spawn orch-agent "$agent_bin" "${args[@]}"
    else
        say "creating a bootstrap token (valid 1h) for the node to join with ..."
        join="$("$apiserver_bin" token create --data-dir "$data_dir" --ttl 1h \
            --description "orch quickstart join of $node_name" --print-join-command)" ||
            die "orch-apiserver token create failed"
        # "orch-agent join --server ... --token ... --discovery-token-ca-cert-hash ..."
        read -r -a join <<<"$join"
        say "starting: $agent_bin join --server ${join[3]} --token <secret> ... ${args[*]}"
        spawn orch-agent "$agent_bin" "${join[@]:1}" "${args[@]}"
    fi
    say "  pid $spawned_pid, log $(log_file orch-agent); waiting for node $node_name to be Ready ..."
    wait_for orch-agent 60 node_ready
    say "node $node_name is Ready"
}

# --- the demo pods -------------------------------------------------------------------------

create_demo_pod() {
    local out code
    extract_client_files || die "cannot read the admin client certificate from $admin_config"
    out="$(api POST /api/v1/namespaces/default/pods -H 'Content-Type: application/yaml' \
        --data-binary "@$demo_pod")" || die "could not reach the API server"
    code="${out##*$'\n'}"
    case "$code" in
        201) say "created pod default/demo (configs/examples/demo-pod.yaml)" ;;
        409) say "pod default/demo already exists" ;;
        *) printf '%s\n' "${out%$'\n'*}" | sed 's/^/    /'; die "creating the demo pod failed (HTTP $code)" ;;
    esac
}

pods_running() {
    [[ "$(get_fact /api/v1/namespaces/default/pods/demo pod-phase)" == Running &&
       "$(get_fact "/api/v1/namespaces/default/pods/static-web-$node_name" pod-phase)" == Running ]]
}

wait_for_pods() {
    say "waiting for the pods demo and static-web-$node_name (its mirror pod) to run ..."
    wait_for orch-agent "$wait_seconds" pods_running
    say "both pods are Running: demo at $(get_fact /api/v1/namespaces/default/pods/demo pod-ip):8080," \
        "static-web-$node_name at $(get_fact "/api/v1/namespaces/default/pods/static-web-$node_name" pod-ip):8080"
}

cmd_start() {
    [[ $(id -u) -eq 0 ]] || die "run this as root (it installs packages, runs containers and writes under /opt, /etc, /var and /run)"
    [[ "$port" =~ ^[0-9]+$ ]] || die "ORCH_PORT must be a port number, not '$port'"
    [[ "$agent_port" =~ ^[0-9]+$ ]] || die "ORCH_AGENT_PORT must be a port number, not '$agent_port'"
    [[ "$wait_seconds" =~ ^[0-9]+$ ]] || die "ORCH_WAIT must be a number of seconds, not '$wait_seconds'"
    install_apt_packages
    install_orch
    start_apiserver
    start_containerd
    start_agent
    create_demo_pod
    wait_for_pods
    cat <<EOF

orch is running: a one-node cluster.
  orch-apiserver  $server_url, storage SQLite in $data_dir (pid $(running_pid orch-apiserver || echo '?'))
  containerd      $containerd_socket, root $containerd_dir (pid $(running_pid containerd || echo '?'))
  orch-agent      node $node_name, root $agent_root, static pods from $manifest_dir (pid $(running_pid orch-agent || echo '?'))
Use it (kubectl reads the admin connection file as it is):
  kubectl --kubeconfig $admin_config get nodes -o wide
  kubectl --kubeconfig $admin_config get pods -o wide
  kubectl --kubeconfig $admin_config logs demo
  kubectl --kubeconfig $admin_config run web --image=orch.local/busybox:1 --image-pull-policy=Never -- httpd -f -p 8080
Logs:     $log_dir/{orch-apiserver,containerd,orch-agent}.log
Status:   $0 status
Stop it:  $0 stop      (data and certificates are kept; '$0' starts it again)
EOF
}

# --- stop and status -----------------------------------------------------------------------

remove_pod_sandboxes() {  # the agent leaves containers running when it stops (as upstream): remove them
    containerd_ready || return 0
    say "stopping and removing the pods in orch's containerd ..."
    "$venv/bin/python" - "unix://$containerd_socket" <<'PY' | sed 's/^/    /' || true
import asyncio, sys
from cri.client import CriClient, NotFoundError

async def main(endpoint):
    async with CriClient(endpoint, request_timeout=60) as cri:
        for sandbox in await cri.list_pod_sandbox():
            name = f"{sandbox.metadata.namespace}/{sandbox.metadata.name}"
            for call in (cri.stop_pod_sandbox, cri.remove_pod_sandbox):
                try:
                    await call(sandbox.id)
                except NotFoundError:
                    pass
            print(f"removed pod {name}")

asyncio.run(main(sys.argv[1]))
PY
}

unmount_pod_volumes() {  # tmpfs volumes (secrets, tokens) the agent mounted for the removed pods
    local points point
    # /proc/self/mounts escapes blanks as \040; orch's paths have none.
    mapfile -t points < <(awk -v prefix="$agent_root/pods/" 'index($2, prefix) == 1 { print $2 }' \
        /proc/self/mounts | sort -r)
    for point in "${points[@]}"; do
        umount "$point" 2>/dev/null || umount -l "$point" 2>/dev/null || say "could not unmount $point"
    done
    ((${#points[@]} == 0)) || say "unmounted ${#points[@]} pod volume(s) under $agent_root/pods"
}

cmd_stop() {
    [[ $(id -u) -eq 0 ]] || die "run this as root"
    stop_daemon orch-agent 30
    # The agent leaves its service rules in place when it stops (so a restart does not
    # cut connections); stopping the whole cluster removes them.
    if [[ -x "$agent_bin" ]]; then
        "$agent_bin" --proxy-cleanup >>"$(log_file orch-agent)" 2>&1 || say "could not remove the service proxy rules (see $(log_file orch-agent))"
    fi
    remove_pod_sandboxes
    unmount_pod_volumes
    stop_daemon containerd 30
    stop_daemon orch-apiserver 30
    say "stopped. Data stays in $data_dir, $agent_root and $containerd_dir; logs in $log_dir."
    say "'$0' starts the cluster again."
}

cmd_status() {
    local pid rc=0 name
    for name in orch-apiserver containerd orch-agent; do
        if pid="$(running_pid "$name")"; then
            say "$name: running (pid $pid), log $(log_file "$name")"
        else
            say "$name: not running"
            rc=3
        fi
    done
    if running_pid orch-apiserver >/dev/null && api_ready; then
        say "API server ready on $server_url"
        say "node $node_name Ready: $(get_fact "/api/v1/nodes/$node_name" node-ready || true)"
        say "pod demo: $(get_fact /api/v1/namespaces/default/pods/demo pod-phase || true)"
        say "pod static-web-$node_name: $(get_fact "/api/v1/namespaces/default/pods/static-web-$node_name" pod-phase || true)"
        say "  kubectl --kubeconfig $admin_config get pods -o wide"
    fi
    return "$rc"
}

case "${1:-start}" in
    start) cmd_start ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    -h | --help | help) sed -n '2,34p' "$0" | sed 's/^# \{0,1\}//' ;;
    *) die "unknown command '$1' (use: start, stop, status)" ;;
esac
