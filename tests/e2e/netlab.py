"""A small private network for the service proxy tests (root only).

Two "pods" (network namespaces on a bridge of their own, 10.253.77.0/24) each run
``python -m http.server`` on its address and answer with its own name; a client
namespace (10.253.78.0/24) sends the requests, so they cross this machine's
prerouting and forwarding as pod and external traffic do. The service range the
tests use (10.111.77.0/24) gets an ``unreachable`` route first, so that without a
rule no packet for it can leave the machine. Everything is removed afterwards.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

POD_NET = "10.253.77"
CLIENT_NET = "10.253.78"
SERVICE_RANGE = "10.111.77.0/24"
BACKEND_PORT = 8080

_CLIENT = r"""
import json, socket, sys, time, urllib.request
url, n, timeout = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
out = []
for _ in range(n):
    t = time.monotonic()
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            out.append(r.read().decode().strip())
    except Exception as exc:
        reason = getattr(exc, "reason", exc)
        out.append("error:" + type(reason).__name__ + ":" + str(reason) + ":%.3f" % (time.monotonic() - t))
print(json.dumps(out))
"""


def sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, check=check, timeout=20)


class NetLab:
    def __init__(self) -> None:
        tag = f"{os.getpid() % 100000}"
        self.ns = {"a": f"opx{tag}a", "b": f"opx{tag}b", "c": f"opx{tag}c"}
        self.bridge = f"opxbr{tag}"
        self.veth = {k: f"opx{tag}{k}h" for k in self.ns}
        self.ip = {"a": f"{POD_NET}.2", "b": f"{POD_NET}.3", "c": f"{CLIENT_NET}.2"}
        self.gateway = {"a": f"{POD_NET}.1", "b": f"{POD_NET}.1", "c": f"{CLIENT_NET}.1"}
        self.node_address = f"{CLIENT_NET}.1"  # a local address the client reaches node ports on
        self.procs: list[subprocess.Popen] = []
        self.tmp = tempfile.mkdtemp(prefix="orch-netlab-")
        self._route = False

    def up(self) -> "NetLab":
        taken = sh("ip", "-4", "route", "show").stdout
        for net in (POD_NET, CLIENT_NET, SERVICE_RANGE.rsplit(".", 1)[0]):
            if f"{net}." in taken:
                raise RuntimeError(f"{net}.0/24 is already routed on this machine; not touching it")
        sh("ip", "route", "add", "unreachable", SERVICE_RANGE)
        self._route = True
        sh("ip", "link", "add", self.bridge, "type", "bridge")
        sh("ip", "addr", "add", f"{POD_NET}.1/24", "dev", self.bridge)
        sh("ip", "link", "set", self.bridge, "up")
        for k, ns in self.ns.items():
            sh("ip", "netns", "add", ns)
            sh("ip", "link", "add", self.veth[k], "type", "veth", "peer", "name", "eth0", "netns", ns)
            if k == "c":
                sh("ip", "addr", "add", f"{CLIENT_NET}.1/24", "dev", self.veth[k])
            else:
                sh("ip", "link", "set", self.veth[k], "master", self.bridge)
                # As the CNI bridge plugin's hairpinMode: with br_netfilter on, a pod's connection
                # to a service that lands on the same pod is bridged back out of its own port.
                sh("ip", "link", "set", "dev", self.veth[k], "type", "bridge_slave", "hairpin", "on")
            sh("ip", "link", "set", self.veth[k], "up")
            sh("ip", "netns", "exec", ns, "ip", "addr", "add", f"{self.ip[k]}/24", "dev", "eth0")
            sh("ip", "netns", "exec", ns, "ip", "link", "set", "eth0", "up")
            sh("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
            sh("ip", "netns", "exec", ns, "ip", "route", "add", "default", "via", self.gateway[k])
        for k in ("a", "b"):
            root = Path(self.tmp) / k
            root.mkdir()
            (root / "index.html").write_text(f"backend-{k}\n")
            self.procs.append(
                subprocess.Popen(
                    [
                        "ip",
                        "netns",
                        "exec",
                        self.ns[k],
                        sys.executable,
                        "-m",
                        "http.server",
                        str(BACKEND_PORT),
                        "--bind",
                        self.ip[k],
                        "-d",
                        str(root),
                    ],  # fmt: skip
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        deadline = time.monotonic() + 30
        for k in ("a", "b"):
            while (got := self.fetch("c", f"http://{self.ip[k]}:{BACKEND_PORT}/", 1)[0]) != f"backend-{k}":
                if time.monotonic() > deadline:
                    raise RuntimeError(f"backend {k} did not start: {got}")
                time.sleep(0.2)
        return self

    def fetch(self, where: str, url: str, n: int, timeout: float = 2.0) -> list[str]:
        """``n`` GETs of ``url`` from namespace ``where``: bodies, or ``error:...:seconds``."""
        done = subprocess.run(
            ["ip", "netns", "exec", self.ns[where], sys.executable, "-c", _CLIENT, url, str(n), str(timeout)],
            capture_output=True,
            text=True,
            timeout=n * (timeout + 1) + 10,
        )
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    def down(self) -> None:
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
        for ns in self.ns.values():
            sh("ip", "netns", "del", ns, check=False)
        for v in self.veth.values():
            sh("ip", "link", "del", v, check=False)
        sh("ip", "link", "del", self.bridge, check=False)
        if self._route:
            sh("ip", "route", "del", "unreachable", SERVICE_RANGE, check=False)
