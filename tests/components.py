"""Real components for tests and benchmarks: containerd and etcd on loopback.

Each instance lives in its own temporary directory (config, data, sockets, log),
listens only on loopback or on unix sockets inside that directory, and is
stopped by the PID it was started with. Nothing here matches processes by name.

    with Containerd() as containerd:
        subprocess.run(["ctr", "--address", containerd.address, "version"])
    with Etcd() as etcd:
        aetcd.Client(etcd.host, etcd.port)

No pytest import: benchmarks use this module directly.
"""

from __future__ import annotations

import atexit
import ctypes
import http.client
import json
import os
import shutil
import signal
import socket
import string
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import psutil

__all__ = [
    "ComponentError",
    "BinaryNotFound",
    "free_port",
    "missing_binaries",
    "render_containerd_config",
    "Containerd",
    "Etcd",
    "REPO_ROOT",
    "CONTAINERD_CONFIG_TEMPLATE",
    "CNI_CONFLIST",
    "IMAGE_BUILDER",
    "image_builder",
]

REPO_ROOT = Path(__file__).resolve().parent.parent
CONTAINERD_CONFIG_TEMPLATE = REPO_ROOT / "packaging" / "containerd" / "config.toml.in"
CNI_CONFLIST = REPO_ROOT / "packaging" / "cni" / "10-orch-bridge.conflist"
IMAGE_BUILDER = REPO_ROOT / "packaging" / "images" / "build.py"

# Which Debian package ships each binary, for error messages.
_APT_PACKAGE = {
    "containerd": "containerd",
    "ctr": "containerd",
    "containerd-shim-runc-v2": "containerd",
    "runc": "runc",
    "etcd": "etcd-server",
    "etcdctl": "etcd-client",
}


class ComponentError(RuntimeError):
    """A component failed to start or to answer."""


class BinaryNotFound(ComponentError):
    """A binary a component needs is not on PATH."""

    def __init__(self, component: str, missing: list[str]):
        self.component = component
        self.missing = list(missing)
        packages = sorted({_APT_PACKAGE.get(name, name) for name in missing})
        super().__init__(
            f"{component}: binary not found on PATH: {', '.join(missing)} "
            f"(install with: apt-get install {' '.join(packages)})"
        )


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def missing_binaries(names) -> list[str]:
    return [name for name in names if shutil.which(name) is None]


def image_builder():
    """packaging/images/build.py as a module (`packaging/` is no import package:
    it would shadow PyPI's `packaging`). ensure_images(address) imports the test
    images (orch.local/busybox:1, orch.local/pause:1) into a containerd."""
    import importlib.util

    name = "orch_image_builder"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, IMAGE_BUILDER)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses look their module up by name
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]
            raise
    return sys.modules[name]


def render_containerd_config(**values: str) -> str:
    """Render packaging/containerd/config.toml.in; every placeholder is required."""
    template = string.Template(CONTAINERD_CONFIG_TEMPLATE.read_text())
    return template.substitute(values)


def _log_tail(path: Path, lines: int = 40) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 64 * 1024))
            text = fh.read().decode("utf-8", "replace")
    except OSError as exc:
        return f"<no log: {exc}>"
    return "\n".join(text.splitlines()[-lines:])


def _mounts_under(directory: Path) -> list[str]:
    """Mount points at or below directory, deepest first."""
    prefix = str(directory).rstrip("/") + "/"
    found = []
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            fields = line.split()
            # Mount points escape space, tab, newline and backslash as octal.
            point = fields[4].encode().decode("unicode_escape")
            if point == prefix[:-1] or point.startswith(prefix):
                found.append(point)
    return sorted(set(found), key=len, reverse=True)


_MNT_DETACH = 2


def _unmount_all_under(directory: Path) -> list[str]:
    """Lazily unmount everything below directory; return what is still mounted."""
    if not _mounts_under(directory):
        return []
    libc = ctypes.CDLL(None, use_errno=True)
    for _ in range(3):
        points = _mounts_under(directory)
        if not points:
            break
        for point in points:
            libc.umount2(point.encode(), _MNT_DETACH)
    return _mounts_under(directory)


def _kill_tree(proc: psutil.Process) -> None:
    """SIGKILL a process and everything below it (children first)."""
    try:
        victims = proc.children(recursive=True)
    except psutil.Error:
        victims = []
    victims.append(proc)
    for victim in victims:
        try:
            victim.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(victims, timeout=5)


# -- a few CRI calls for teardown --------------------------------------------
# The fixture must not depend on the project's own CRI client (it is what the
# tests test), so teardown speaks the two messages it needs by hand:
# ListPodSandboxResponse{repeated PodSandbox items = 1}, PodSandbox{string id = 1},
# Stop/RemovePodSandboxRequest{string pod_sandbox_id = 1}.


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def _length_delimited_fields(data: bytes, wanted: int) -> list[bytes]:
    """The values of every length-delimited field numbered `wanted`."""
    found, pos = [], 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire_type = key >> 3, key & 7
        if wire_type == 0:
            _, pos = _varint(data, pos)
        elif wire_type == 1:
            pos += 8
        elif wire_type == 5:
            pos += 4
        elif wire_type == 2:
            length, pos = _varint(data, pos)
            if number == wanted:
                found.append(data[pos : pos + length])
            pos += length
        else:
            raise ValueError(f"unsupported protobuf wire type {wire_type}")
    return found


def _string_field_1(value: str) -> bytes:
    raw = value.encode()
    length, out = len(raw), bytearray(b"\x0a")
    while length >= 0x80:
        out.append((length & 0x7F) | 0x80)
        length >>= 7
    out.append(length)
    return bytes(out) + raw


def _cri_remove_all_pod_sandboxes(endpoint: str, timeout: float = 30) -> list[str]:
    """Stop and remove every pod sandbox (with its containers, network namespace,
    CNI attachment and IP) through containerd's CRI service. Returns the IDs."""
    import grpc  # a project dependency; imported late to keep this module light

    def call(channel, method: str, body: bytes) -> bytes:
        return channel.unary_unary(f"/runtime.v1.RuntimeService/{method}")(body, timeout=timeout)

    removed = []
    with grpc.insecure_channel(endpoint) as channel:
        listing = call(channel, "ListPodSandbox", b"")
        for item in _length_delimited_fields(listing, 1):
            ids = _length_delimited_fields(item, 1)
            if not ids:
                continue
            sandbox_id = ids[0].decode()
            for method in ("StopPodSandbox", "RemovePodSandbox"):
                try:
                    call(channel, method, _string_field_1(sandbox_id))
                except grpc.RpcError as exc:
                    if exc.code() != grpc.StatusCode.NOT_FOUND:
                        raise
            removed.append(sandbox_id)
    return removed


class _Daemon:
    """A daemon started by this process and stopped by its PID."""

    component = "daemon"
    binaries: tuple[str, ...] = ()

    def __init__(self, *, base_dir: str | os.PathLike | None = None, keep_dir: bool = False):
        self._base_dir = base_dir
        self._keep_dir = keep_dir
        self._dir: Path | None = None
        # After stop() the path stays readable (no new directory appears when a
        # property is read late); start() again makes a fresh one.
        self._dir_removed = False
        self._proc: subprocess.Popen | None = None
        self._log_fh = None

    # -- public ------------------------------------------------------------

    @property
    def dir(self) -> Path:
        """The instance's private temporary directory."""
        if self._dir is None:
            self._dir = Path(tempfile.mkdtemp(prefix=f"orch-{self.component}-", dir=self._base_dir))
        return self._dir

    @property
    def log_path(self) -> Path:
        return self.dir / f"{self.component}.log"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        return _log_tail(self.log_path, lines)

    def check_binaries(self) -> None:
        missing = missing_binaries(self.binaries)
        if missing:
            raise BinaryNotFound(self.component, missing)

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()

    # -- for subclasses ----------------------------------------------------

    def _spawn(self, argv: list[str], env: dict[str, str] | None = None) -> None:
        self._log_fh = open(self.log_path, "ab")
        self._proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=self._log_fh,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=self.dir,
            # Own session: a Ctrl-C at the terminal reaches pytest, and the
            # fixture, not the daemon, decides how it ends.
            start_new_session=True,
        )
        atexit.register(self.stop)

    def _fail(self, message: str) -> ComponentError:
        return ComponentError(f"{self.component} {message}\n--- last lines of {self.log_path} ---\n{self.log_tail()}")

    def _terminate(self, timeout: float) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        if self._log_fh is not None:
            self._log_fh.close()
            self._log_fh = None
        atexit.unregister(self.stop)

    def _remove_dir(self) -> None:
        if self._dir is None or self._dir_removed or self._keep_dir or not self._dir.exists():
            return
        still_mounted = _unmount_all_under(self._dir)
        if still_mounted:
            # Never recurse into a mount we could not detach: it may be a bind
            # mount of something outside the temporary directory.
            raise ComponentError(f"{self.component}: left {self._dir} in place, still mounted: {still_mounted}")
        shutil.rmtree(self._dir, ignore_errors=True)
        self._dir_removed = True

    def _fresh_dir(self) -> None:
        if self._dir_removed:
            self._dir, self._dir_removed = None, False

    def _nothing_to_stop(self) -> bool:
        return self._proc is None and (self._dir is None or self._dir_removed)


class Containerd(_Daemon):
    """A private containerd with the CRI plugin, configured from packaging/.

    Everything lives under one temporary directory: root, state, the gRPC,
    ttrpc and debug sockets, the CNI conf_dir and the log. The CRI stream
    server listens on 127.0.0.1 on a free port.
    """

    component = "containerd"
    binaries = ("containerd", "ctr", "containerd-shim-runc-v2", "runc")

    def __init__(
        self,
        *,
        base_dir: str | os.PathLike | None = None,
        sandbox_image: str = "orch.local/pause:1",
        cni_conflist: str | os.PathLike | None = CNI_CONFLIST,
        cni_bin_dir: str = "/usr/lib/cni",
        log_level: str = "info",
        keep_dir: bool = False,
    ):
        super().__init__(base_dir=base_dir, keep_dir=keep_dir)
        self.sandbox_image = sandbox_image
        self.cni_conflist = Path(cni_conflist) if cni_conflist is not None else None
        self.cni_bin_dir = cni_bin_dir
        self.log_level = log_level
        self.stream_port = free_port()

    @property
    def root(self) -> Path:
        return self.dir / "root"

    @property
    def state(self) -> Path:
        return self.dir / "state"

    @property
    def socket(self) -> Path:
        return self.dir / "containerd.sock"

    @property
    def address(self) -> str:
        """What `ctr --address` takes: the socket path."""
        return str(self.socket)

    @property
    def endpoint(self) -> str:
        """What a gRPC (CRI) client dials."""
        return f"unix://{self.socket}"

    @property
    def config_path(self) -> Path:
        return self.dir / "config.toml"

    @property
    def cni_conf_dir(self) -> Path:
        return self.dir / "cni" / "net.d"

    def render_config(self) -> str:
        return render_containerd_config(
            root=str(self.root),
            state=str(self.state),
            grpc_address=str(self.socket),
            ttrpc_address=str(self.dir / "containerd.ttrpc.sock"),
            debug_address=str(self.dir / "containerd.debug.sock"),
            log_level=self.log_level,
            opt_path=str(self.dir / "opt"),
            runc_root=str(self.state / "runc"),
            sandbox_image=self.sandbox_image,
            stream_server_address="127.0.0.1",
            stream_server_port=str(self.stream_port),
            cni_bin_dir=self.cni_bin_dir,
            cni_conf_dir=str(self.cni_conf_dir),
        )

    def ctr(
        self, *args: str, namespace: str | None = None, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess:
        """Run `ctr --address SOCK [-n NS] ARGS...`; text output captured."""
        argv = ["ctr", "--address", self.address]
        if namespace is not None:
            argv += ["--namespace", namespace]
        argv += list(args)
        result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        if check and result.returncode != 0:
            raise ComponentError(f"{' '.join(argv)} exited {result.returncode}: {result.stderr.strip()}")
        return result

    def start(self, timeout: float = 20) -> "Containerd":
        if self.running:
            return self
        self.check_binaries()
        self._fresh_dir()
        try:
            for path in (self.root, self.state, self.cni_conf_dir):
                path.mkdir(parents=True, exist_ok=True)
            self.config_path.write_text(self.render_config())
            if self.cni_conflist is not None:
                shutil.copy(self.cni_conflist, self.cni_conf_dir / self.cni_conflist.name)
            self._spawn_containerd()
            self._wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _spawn_containerd(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CONTAINERD_")}
        self._spawn([shutil.which("containerd"), "--config", str(self.config_path)], env=env)

    def stop_daemon(self, timeout: float = 15) -> None:
        """Stop only the containerd process, as a runtime restart does: shims,
        containers, pod sandboxes and the directory stay. restart() brings it back."""
        self._terminate(timeout)

    def restart(self, timeout: float = 20) -> "Containerd":
        """Restart the containerd process on the same directory and socket (after
        stop_daemon(), or stopping it now); running containers are kept."""
        if self._dir is None or self._dir_removed:
            raise ComponentError("containerd: restart() before start()")
        self._terminate(15)
        self._spawn_containerd()
        self._wait_ready(timeout)
        return self

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last_error = "socket not created"
        while True:
            if self._proc.poll() is not None:
                raise self._fail(f"exited with code {self._proc.returncode} during start")
            if self.socket.exists():
                try:
                    result = self.ctr("version", check=False, timeout=5)
                    if result.returncode == 0:
                        break
                    last_error = result.stderr.strip()
                except subprocess.TimeoutExpired:
                    last_error = "ctr version timed out"
            if time.monotonic() > deadline:
                raise self._fail(f"not ready after {timeout:g}s ({last_error})")
            time.sleep(0.05)
        # containerd serves even when the CRI plugin failed to load; catch that
        # here rather than as a puzzling "unknown service" in some later test.
        plugins = self.ctr("plugins", "ls", timeout=10).stdout
        for line in plugins.splitlines():
            fields = line.split()
            if len(fields) >= 4 and fields[0] == "io.containerd.grpc.v1" and fields[1] == "cri":
                if fields[-1] != "ok":
                    raise self._fail(f"CRI plugin status {fields[-1]!r}")
                return
        raise self._fail("has no CRI plugin (io.containerd.grpc.v1 cri)")

    def stop(self, timeout: float = 15) -> None:
        """Stop containerd and everything it started; remove its directory."""
        if self._nothing_to_stop():
            return
        try:
            if self.running:
                self._remove_pod_sandboxes()
                self._delete_tasks()
        finally:
            self._terminate(timeout)
            try:
                self._kill_leftover_shims()
            finally:
                self._remove_dir()

    def _remove_pod_sandboxes(self) -> None:
        """Best effort: pods a test left behind would otherwise leak their network
        namespace, veth, IP reservation and iptables chains on the host."""
        try:
            leftovers = _cri_remove_all_pod_sandboxes(self.endpoint)
        except Exception as exc:  # noqa: BLE001 - teardown must go on
            print(f"orch tests: {self.component}: removing pod sandboxes failed: {exc}", file=sys.stderr)
            return
        if leftovers:
            print(
                f"orch tests: {self.component}: removed {len(leftovers)} leftover pod sandbox(es) at stop",
                file=sys.stderr,
            )

    def _delete_tasks(self) -> None:
        """Best effort: kill and delete every task so the shims exit and unmount."""
        try:
            namespaces = self.ctr("namespaces", "ls", "-q", check=False, timeout=10).stdout.split()
            for namespace in namespaces:
                tasks = self.ctr("tasks", "ls", "-q", namespace=namespace, check=False, timeout=10).stdout.split()
                for task in tasks:
                    self.ctr("tasks", "delete", "--force", task, namespace=namespace, check=False, timeout=20)
        except (subprocess.TimeoutExpired, OSError):
            pass

    def _owned_shims(self) -> list[psutil.Process]:
        """Shims of this instance: their command line has `-address SOCK` with our
        socket. Matched by PID and arguments, never by process name."""
        socket_path = str(self.socket)
        shims = []
        for proc in psutil.process_iter(["cmdline"]):
            cmdline = proc.info.get("cmdline") or []
            for flag, value in zip(cmdline, cmdline[1:]):
                if flag == "-address" and value == socket_path:
                    shims.append(proc)
                    break
        return shims

    def _kill_leftover_shims(self) -> None:
        if self._dir is None:
            return
        shims = self._owned_shims()
        for shim in shims:
            args = dict(zip(shim.info["cmdline"], shim.info["cmdline"][1:]))
            _kill_tree(shim)
            # Containers started without our runtime options (`ctr run`) keep
            # runc state under the default root; stale state blocks the same ID.
            namespace, container_id = args.get("-namespace"), args.get("-id")
            if namespace and container_id and "/" not in namespace + container_id:
                shutil.rmtree(Path("/run/containerd/runc", namespace, container_id), ignore_errors=True)
        if shims:
            # A killed shim leaves its socket in /run/containerd/s (a path fixed
            # in containerd 1.6); the bundle's `address` file names it.
            for address_file in self.state.glob("io.containerd.runtime.v2.task/*/*/address"):
                try:
                    address = address_file.read_text().strip()
                except OSError:
                    continue
                path = address.removeprefix("unix://")
                if path.startswith("/run/containerd/s/"):
                    Path(path).unlink(missing_ok=True)


class Etcd(_Daemon):
    """A single-member etcd on 127.0.0.1 with free client and peer ports."""

    component = "etcd"
    binaries = ("etcd",)

    def __init__(
        self,
        *,
        base_dir: str | os.PathLike | None = None,
        name: str = "test",
        quota_backend_bytes: int = 2 * 1024**3,
        log_level: str = "info",
        extra_args: tuple[str, ...] | list[str] = (),
        keep_dir: bool = False,
    ):
        super().__init__(base_dir=base_dir, keep_dir=keep_dir)
        self.name = name
        self.quota_backend_bytes = quota_backend_bytes
        self.log_level = log_level
        self.extra_args = list(extra_args)
        self.host = "127.0.0.1"
        self.port = free_port()
        self.peer_port = free_port()

    @property
    def endpoint(self) -> str:
        """host:port of the client URL, as etcd clients take it."""
        return f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def peer_url(self) -> str:
        return f"http://{self.host}:{self.peer_port}"

    @property
    def data_dir(self) -> Path:
        return self.dir / "data"

    def argv(self) -> list[str]:
        return [
            shutil.which("etcd") or "etcd",
            "--name",
            self.name,
            "--data-dir",
            str(self.data_dir),
            "--listen-client-urls",
            self.url,
            "--advertise-client-urls",
            self.url,
            "--listen-peer-urls",
            self.peer_url,
            "--initial-advertise-peer-urls",
            self.peer_url,
            "--initial-cluster",
            f"{self.name}={self.peer_url}",
            "--initial-cluster-state",
            "new",
            "--initial-cluster-token",
            f"orch-test-{os.getpid()}-{self.port}",
            "--quota-backend-bytes",
            str(self.quota_backend_bytes),
            "--logger",
            "zap",
            "--log-outputs",
            "stderr",
            "--log-level",
            self.log_level,
            *self.extra_args,
        ]

    def etcdctl(
        self, *args: str, check: bool = True, timeout: float = 30, input: str | None = None
    ) -> subprocess.CompletedProcess:
        """Run `etcdctl --endpoints URL ARGS...` (API v3); text output captured."""
        if shutil.which("etcdctl") is None:
            raise BinaryNotFound("etcdctl", ["etcdctl"])
        argv = ["etcdctl", "--endpoints", self.url, *args]
        env = {k: v for k, v in os.environ.items() if not k.startswith("ETCDCTL_")}
        env["ETCDCTL_API"] = "3"
        result = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            input=input,
            stdin=None if input is not None else subprocess.DEVNULL,
        )
        if check and result.returncode != 0:
            raise ComponentError(f"{' '.join(argv)} exited {result.returncode}: {result.stderr.strip()}")
        return result

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=2) as response:
                return json.loads(response.read()).get("health") == "true"
        except (OSError, ValueError, http.client.HTTPException):
            return False

    def start(self, timeout: float = 20) -> "Etcd":
        if self.running:
            return self
        self.check_binaries()
        self._fresh_dir()
        # ETCD_* variables would override our flags (or clash with them).
        env = {k: v for k, v in os.environ.items() if not k.startswith("ETCD_")}
        for attempt in range(3):
            self._spawn(self.argv(), env=env)
            try:
                self._wait_ready(timeout)
                return self
            except ComponentError:
                port_taken = "address already in use" in self.log_tail(200)
                self._terminate(10)
                if not port_taken or attempt == 2:
                    self._remove_dir()
                    raise
                # Another process took a port between free_port() and bind.
                shutil.rmtree(self.data_dir, ignore_errors=True)
                self.port, self.peer_port = free_port(), free_port()
            except BaseException:
                self.stop()
                raise
        raise AssertionError("unreachable")

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not self.healthy():
            if self._proc.poll() is not None:
                raise self._fail(f"exited with code {self._proc.returncode} during start")
            if time.monotonic() > deadline:
                raise self._fail(f"not healthy at {self.url}/health after {timeout:g}s")
            time.sleep(0.05)

    def stop_daemon(self, timeout: float = 15) -> None:
        """Stop only the etcd process (SIGTERM by PID); its data directory stays
        for restart()."""
        self._terminate(timeout)

    def restart(self, timeout: float = 20) -> "Etcd":
        """Start etcd again on the same data directory and ports (after
        stop_daemon(), or stopping it now)."""
        if self._dir is None or self._dir_removed:
            raise ComponentError("etcd: restart() before start()")
        self._terminate(15)
        env = {k: v for k, v in os.environ.items() if not k.startswith("ETCD_")}
        self._spawn(self.argv(), env=env)
        self._wait_ready(timeout)
        return self

    def stop(self, timeout: float = 15) -> None:
        """Stop etcd by its PID and remove its directory."""
        if self._nothing_to_stop():
            return
        self._terminate(timeout)
        self._remove_dir()
