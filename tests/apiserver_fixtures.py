"""The real ``orch-apiserver`` as a subprocess, for integration and e2e tests.

    with ApiServerProcess(data_dir, free_port()) as server:
        status, headers, body = server.request("GET", "/api/v1/namespaces")
        server.json("GET", "/api/v1/namespaces/default")

The server writes DATA_DIR/admin.orchconfig (kubeconfig shape) with an admin
client certificate; this module extracts it into files for an ``ssl.SSLContext``
and speaks HTTPS with ``http.client``. The process is stopped by its PID:
SIGTERM, then SIGKILL.

Fixtures: ``apiserver`` (module-scoped, SQLite), ``apiserver_etcd`` (module-scoped,
on the session etcd under a unique prefix), ``kubectl`` (runs /usr/bin/kubectl
against ``apiserver`` with a private HOME; ``Kubectl(..., binary=kubectl_binary("1.27"))``
runs one installed version directly), ``k8s_client`` (a
``kubernetes.client.ApiClient`` for ``apiserver``).
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import shutil
import signal
import ssl
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from apiserver_min.api import names as api_names
from tests.components import free_port
from tests.helpers import console_script

__all__ = [
    "ApiServerProcess",
    "ApiServerError",
    "APISERVER_BIN",
    "KUBECTL",
    "Kubectl",
    "kubectl_binary",
    "ROOT_CA_CONFIGMAP",
    "create_namespace",
    "without_root_ca",
    "apiserver",
    "apiserver_etcd",
    "kubectl",
    "k8s_client",
]

APISERVER_BIN = console_script("orch-apiserver")
KUBECTL = "/usr/bin/kubectl"
# The versioned binaries behind the /usr/bin/kubectl dispatcher (which picks one by the
# server's /version minor).
KUBECTL_VERSIONS_DIR = Path("/usr/lib/google-cloud-sdk/bin")


def kubectl_binary(version: str) -> str:
    """The installed kubectl of VERSION (``"1.27"``), to call directly."""
    return str(KUBECTL_VERSIONS_DIR / f"kubectl.{version}")


# The ConfigMap the server publishes in every namespace (with the ``default``
# ServiceAccount), as upstream's root-ca-cert-publisher does.
ROOT_CA_CONFIGMAP = api_names.ROOT_CA_CONFIGMAP


class ApiServerError(RuntimeError):
    pass


def without_root_ca(names: list[str]) -> list[str]:
    """NAMES without the root CA ConfigMap: what a test created itself in its namespace."""
    return [n for n in names if n != ROOT_CA_CONFIGMAP]


def create_namespace(server: "ApiServerProcess", name: str, timeout: float = 10.0) -> dict:
    """Create namespace NAME and wait until the server's controller has added what every
    namespace gets (the ``default`` ServiceAccount and the root CA ConfigMap). Both come
    asynchronously; waiting keeps lists, resource versions and watches in the test's
    namespace from changing under it. Returns the Namespace."""
    _, obj = server.json("POST", "/api/v1/namespaces", {"metadata": {"name": name}}, expect=201)
    wanted = (
        f"/api/v1/namespaces/{name}/serviceaccounts/{api_names.DEFAULT_SERVICE_ACCOUNT}",
        f"/api/v1/namespaces/{name}/configmaps/{ROOT_CA_CONFIGMAP}",
    )
    deadline = time.monotonic() + timeout
    for path in wanted:
        while (status := server.request("GET", path)[0]) != 200:
            assert status == 404, f"GET {path}: {status}"
            if time.monotonic() > deadline:
                raise AssertionError(f"namespace {name}: {path} not created within {timeout}s")
            time.sleep(0.02)
    return obj


class ApiServerProcess:
    """One ``orch-apiserver`` process on 127.0.0.1:port with its data dir."""

    def __init__(
        self,
        data_dir: str | os.PathLike,
        port: int | None = None,
        backend: str = "sqlite",
        etcd_endpoint: str | None = None,
        etcd_prefix: str | None = None,
        extra_args: tuple[str, ...] | list[str] = (),
        extra_env: dict[str, str] | None = None,
    ):
        self.data_dir = Path(data_dir)
        self.extra_env = dict(extra_env or {})
        self.port = port or free_port()
        self.backend = backend
        self.etcd_endpoint = etcd_endpoint
        self.etcd_prefix = etcd_prefix
        self.extra_args = list(extra_args)
        self.host = "127.0.0.1"
        self.proc: subprocess.Popen | None = None
        self._log_fh = None
        self._ssl: ssl.SSLContext | None = None
        self.starts = 0

    # --- paths ----------------------------------------------------------------------
    @property
    def kubeconfig(self) -> Path:
        return self.data_dir / "admin.orchconfig"

    @property
    def ca_cert(self) -> Path:
        return self.data_dir / "pki" / "ca.crt"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "apiserver.log"

    @property
    def url(self) -> str:
        return f"https://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def argv(self) -> list[str]:
        argv = [
            str(APISERVER_BIN),
            "--data-dir",
            str(self.data_dir),
            "--bind-address",
            self.host,
            "--secure-port",
            str(self.port),
        ]
        if self.backend in ("etcd", "etcd3"):
            argv += ["--storage-backend", "etcd3", "--etcd-servers", f"http://{self.etcd_endpoint}"]
            if self.etcd_prefix:
                argv += ["--etcd-prefix", self.etcd_prefix.rstrip("/") or "/"]
        return argv + self.extra_args

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError as exc:
            return f"<no log: {exc}>"

    # --- lifecycle ------------------------------------------------------------------
    def start(self, timeout: float = 20) -> "ApiServerProcess":
        if self.running:
            return self
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._log_fh = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            self.argv(),
            stdin=subprocess.DEVNULL,
            stdout=self._log_fh,
            stderr=subprocess.STDOUT,
            cwd=self.data_dir,
            start_new_session=True,
            env={**os.environ, **self.extra_env} if self.extra_env else None,
        )
        self.starts += 1
        self._ssl = None
        deadline = time.monotonic() + timeout
        last = ""
        while True:
            if self.proc.poll() is not None:
                raise ApiServerError(
                    f"orch-apiserver exited with {self.proc.returncode} during start\n"
                    f"--- {self.log_path} ---\n{self.log_tail()}"
                )
            if self.kubeconfig.exists() and self.ca_cert.exists():
                try:
                    status, _, body = self.request("GET", "/readyz", timeout=2)
                    if status == 200:
                        return self
                    last = f"{status} {body[:200]!r}"
                except (OSError, http.client.HTTPException, ssl.SSLError, ValueError, KeyError) as exc:
                    last = repr(exc)
                    self._ssl = None
            if time.monotonic() > deadline:
                self.stop()
                raise ApiServerError(
                    f"orch-apiserver not ready after {timeout}s ({last})\n--- {self.log_path} ---\n{self.log_tail()}"
                )
            time.sleep(0.05)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 10) -> int | None:
        """SIGTERM by PID, SIGKILL after timeout; returns the exit code."""
        proc, self.proc = self.proc, None
        code = None
        if proc is not None:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(10)
            code = proc.returncode
        if self._log_fh is not None:
            self._log_fh.close()
            self._log_fh = None
        return code

    def kill(self) -> None:
        """SIGKILL by PID (crash test)."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(10)
        if self._log_fh is not None:
            self._log_fh.close()
            self._log_fh = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # --- HTTPS ----------------------------------------------------------------------
    def client_cert_files(self) -> tuple[Path, Path]:
        """The admin client certificate and key from admin.orchconfig, as files."""
        cert, key = self.data_dir / "test-admin.crt", self.data_dir / "test-admin.key"
        if not cert.exists() or not key.exists():
            cfg = yaml.safe_load(self.kubeconfig.read_text())
            user = cfg["users"][0]["user"]
            cert.write_bytes(base64.b64decode(user["client-certificate-data"]))
            fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as fh:
                fh.write(base64.b64decode(user["client-key-data"]))
        return cert, key

    def ssl_context(self, client_cert: bool = True) -> ssl.SSLContext:
        if client_cert and self._ssl is not None:
            return self._ssl
        ctx = ssl.create_default_context(cafile=str(self.ca_cert))
        if client_cert:
            cert, key = self.client_cert_files()
            ctx.load_cert_chain(str(cert), str(key))
            self._ssl = ctx
        return ctx

    def connection(self, timeout: float = 10, client_cert: bool = True) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection(self.host, self.port, timeout=timeout, context=self.ssl_context(client_cert))

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        headers: dict | None = None,
        *,
        timeout: float = 10,
        client_cert: bool = True,
    ) -> tuple[int, dict, bytes]:
        """One request; a dict/list body is sent as JSON. Returns (status, headers, body)."""
        headers = dict(headers or {})
        if body is not None and not isinstance(body, (bytes, str)):
            body = json.dumps(body)
            headers.setdefault("Content-Type", "application/json")
        if isinstance(body, str):
            body = body.encode()
        conn = self.connection(timeout, client_cert)
        try:
            conn.request(method, path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data
        finally:
            conn.close()

    def json(
        self,
        method: str,
        path: str,
        body: Any = None,
        headers: dict | None = None,
        expect: int | tuple[int, ...] | None = None,
        **kw,
    ) -> tuple[int, Any]:
        """request() and decode the JSON reply; with expect, assert the status."""
        status, hdrs, data = self.request(method, path, body, headers, **kw)
        try:
            doc = json.loads(data) if data else None
        except ValueError:
            doc = data.decode(errors="replace")
        if expect is not None:
            want = (expect,) if isinstance(expect, int) else expect
            assert status in want, f"{method} {path}: {status} (wanted {want}): {doc}"
        return status, doc

    def watch(self, path: str, timeout: float = 10, headers: dict | None = None) -> "WatchStream":
        return WatchStream(self, path, timeout, headers)


class WatchStream:
    """A streaming GET: yields decoded JSON lines as they arrive."""

    def __init__(self, server: ApiServerProcess, path: str, timeout: float, headers: dict | None):
        self.conn = server.connection(timeout)
        self.conn.request("GET", path, headers=headers or {})
        self.resp = self.conn.getresponse()
        self.status = self.resp.status
        self.headers = {k.lower(): v for k, v in self.resp.getheaders()}

    def next(self) -> dict | None:
        """The next event, or None at the end of the stream (socket timeout raises)."""
        while True:
            line = self.resp.readline()
            if not line:
                return None
            line = line.strip()
            if line:
                return json.loads(line)

    def events(self, n: int) -> list[dict]:
        out = []
        while len(out) < n:
            ev = self.next()
            if ev is None:
                break
            out.append(ev)
        return out

    def read_all(self) -> list[dict]:
        out = []
        while (ev := self.next()) is not None:
            out.append(ev)
        return out

    def close(self) -> None:
        try:
            self.conn.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _require_binary() -> None:
    if not APISERVER_BIN.exists():
        pytest.skip(f"{APISERVER_BIN} missing (run tests/run.sh once to create .venv)")


@pytest.fixture(scope="module")
def apiserver(tmp_path_factory):
    """A SQLite-backed orch-apiserver for the module."""
    _require_binary()
    server = ApiServerProcess(tmp_path_factory.mktemp("apiserver"), free_port())
    with server:
        yield server


@pytest.fixture(scope="module")
def apiserver_etcd(etcd, tmp_path_factory):
    """An etcd-backed orch-apiserver for the module, under a prefix no one else uses."""
    _require_binary()
    prefix = f"/orch-test/{uuid.uuid4().hex}"
    server = ApiServerProcess(
        tmp_path_factory.mktemp("apiserver-etcd"),
        free_port(),
        backend="etcd",
        etcd_endpoint=etcd.endpoint,
        etcd_prefix=prefix,
    )
    with server:
        yield server


class Kubectl:
    """``kubectl --kubeconfig ADMIN ARGS`` with a private HOME (own discovery cache)."""

    def __init__(self, server: ApiServerProcess, home: Path, binary: str = KUBECTL):
        self.server = server
        self.home = home
        self.binary = binary
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("KUBE")}
        self.env["HOME"] = str(home)

    def argv(self, *args: str) -> list[str]:
        return [self.binary, "--kubeconfig", str(self.server.kubeconfig), *args]

    def __call__(
        self, *args: str, input: str | None = None, timeout: float = 30, check: bool = False
    ) -> subprocess.CompletedProcess:
        result = subprocess.run(
            self.argv(*args),
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=self.env,
            stdin=None if input is not None else subprocess.DEVNULL,
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"kubectl {' '.join(args)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
            )
        return result

    def popen(self, *args: str) -> subprocess.Popen:
        return subprocess.Popen(
            self.argv(*args),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=self.env,
        )


@pytest.fixture(scope="module")
def kubectl(apiserver, tmp_path_factory):
    if shutil.which(KUBECTL) is None and not os.path.exists(KUBECTL):
        pytest.skip(f"{KUBECTL} not installed")
    return Kubectl(apiserver, tmp_path_factory.mktemp("kubectl-home"))


@pytest.fixture(scope="module")
def k8s_client(apiserver):
    kubernetes = pytest.importorskip("kubernetes")
    client = kubernetes.config.new_client_from_config(config_file=str(apiserver.kubeconfig))
    yield client
    client.close()
