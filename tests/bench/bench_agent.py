"""Agent start-up and idle footprint (not a test): python tests/bench/bench_agent.py [--runs N]

Starts orch-agent (the installed console script next to this Python, else
``python -m agent.cli``) with no pods under a real NOTIFY_SOCKET, several times,
and prints:

* time from exec to READY=1 (from bytecode, as an installed agent starts) (median and worst of the runs), target <= 1.5 s;
* resident memory (RSS, and USS/PSS where the kernel reports them) after idling
  a few seconds with no pods, target <= 60 MB;
* where that resident memory lies (``/proc/PID/smaps``): the private heap and
  anonymous mappings (Python objects, C allocations, thread stacks) against the
  shared libraries mapped from files, largest first, so that a change aimed at
  the figure can be judged by the part it can move;
* the modules imported at start, to keep the import graph lean (aiohttp, grpc,
  cryptography must not be among them).
"""

from __future__ import annotations

import argparse
import compileall
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from apiserver_min.api import names

READY_TARGET_S = 1.5
RSS_TARGET_MB = 60.0
HEAVY = ("aiohttp", "grpc", "cryptography", "google.protobuf", "kubernetes", "uvloop", "orjson")


def agent_argv() -> list[str]:
    script = Path(sys.executable).parent / names.AGENT_NAME
    return [str(script)] if script.exists() else [sys.executable, "-m", "agent.cli"]


def start(workdir: Path, extra_env: dict[str, str] | None = None):
    sockdir = tempfile.mkdtemp(prefix="orch-b-", dir="/tmp")
    path = os.path.join(sockdir, "notify")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    swaps = workdir / "swaps"
    swaps.write_text("Filename\tType\tSize\tUsed\tPriority\n")
    # This checkout's code first: the environment's editable install may point at another.
    env = {
        **os.environ,
        "PYTHONPATH": os.environ.get("PYTHONPATH") or str(REPO),
        "NOTIFY_SOCKET": path,
        names.ENV_AGENT_TEST_PROC_SWAPS: str(swaps),
        **(extra_env or {}),
    }
    argv = agent_argv() + [f"--root-dir={workdir / 'root'}", "--healthz-port=0", "--deprecation-warnings=false"]
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        argv, cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    sock.settimeout(30)
    while True:
        data = sock.recv(4096).decode()
        if "READY=1" in data.split("\n"):
            ready = time.perf_counter() - t0
            break
    return proc, ready, sock, sockdir


def stop(proc, sock, sockdir) -> None:
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=30)
    sock.close()
    os.unlink(os.path.join(sockdir, "notify"))
    os.rmdir(sockdir)


def memory_mb(pid: int) -> dict[str, float]:
    p = psutil.Process(pid)
    out = {"rss": p.memory_info().rss / 2**20}
    try:
        full = p.memory_full_info()
        out["uss"] = full.uss / 2**20
        out["pss"] = getattr(full, "pss", 0) / 2**20
    except (psutil.AccessDenied, AttributeError):
        pass
    return out


def memory_by_mapping(pid: int) -> dict[str, float]:
    """Resident MB per mapping kind: "[heap]", "[anon]", "[stack]", or a mapped file's name."""
    out: dict[str, float] = {}
    where = "[anon]"
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            head = line.split(maxsplit=5)
            if not head[0].endswith(":"):  # a mapping's first line: range perms offset dev inode [path]
                path = head[5].strip() if len(head) > 5 else ""
                where = path.rsplit("/", 1)[-1] if path else "[anon]"
            elif head[0] == "Rss:":
                out[where] = out.get(where, 0.0) + int(head[1]) / 1024
    return out


def breakdown_text(by_mapping: dict[str, float], top: int = 6) -> str:
    anon = sum(v for k, v in by_mapping.items() if k.startswith("["))
    files = sorted(((v, k) for k, v in by_mapping.items() if not k.startswith("[")), reverse=True)
    shown = ", ".join(f"{k} {v:.1f}" for v, k in files[:top])
    rest = sum(v for v, _ in files[top:])
    return (
        f"  where it lies: heap and anonymous {anon:.1f} MB "
        f"(heap {by_mapping.get('[heap]', 0.0):.1f}); files {sum(v for v, _ in files):.1f} MB "
        f"({shown}, {len(files) - top} others {rest:.1f})"
    )


def imported_modules() -> set[str]:
    code = (
        "import sys, agent.cli, agent.options, agent.config, agent.validation, agent.process, "
        "agent.logging; print('\\n'.join(sorted(sys.modules)))"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    return set(r.stdout.split())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--idle", type=float, default=5.0, help="seconds to idle before measuring memory")
    args = ap.parse_args()

    # An installed agent runs from bytecode (pip compiles what it installs); a checkout run
    # with PYTHONDONTWRITEBYTECODE would compile every module at each start instead, which
    # shows as about 0.7 s more start-up and 1 MB more memory than a node has.
    compiled = all(compileall.compile_dir(REPO / top, quiet=1) for top in ("agent", "apiserver_min", "cri"))
    if not compiled:
        sys.exit("cannot compile the checkout's modules")
    readies = []
    with tempfile.TemporaryDirectory() as d:
        for i in range(args.runs):
            work = Path(d) / f"run{i}"
            work.mkdir()
            proc, ready, sock, sockdir = start(work)
            readies.append(ready)
            if i < args.runs - 1:
                stop(proc, sock, sockdir)
        time.sleep(args.idle)
        mem = memory_mb(proc.pid)
        by_mapping = memory_by_mapping(proc.pid)
        stop(proc, sock, sockdir)

    med, worst = statistics.median(readies), max(readies)
    modules = imported_modules()
    heavy = [m for m in HEAVY if m in modules]

    def ok(good):
        return "ok" if good else "OVER TARGET"

    print(f"orch-agent ({' '.join(agent_argv())}), Python {sys.version.split()[0]}, {args.runs} runs")
    print(
        f"  start-up to READY=1: median {med:.3f} s, worst {worst:.3f} s "
        f"(target <= {READY_TARGET_S} s: {ok(worst <= READY_TARGET_S)})"
    )
    line = f"  idle RSS after {args.idle:g} s, no pods: {mem['rss']:.1f} MB"
    if "uss" in mem:
        line += f" (USS {mem['uss']:.1f} MB, PSS {mem['pss']:.1f} MB)"
    print(f"{line} (target <= {RSS_TARGET_MB:g} MB: {ok(mem['rss'] <= RSS_TARGET_MB)})")
    print(breakdown_text(by_mapping))
    print(f"  modules imported at start: {len(modules)}; heavy ones: {', '.join(heavy) or 'none'}")


if __name__ == "__main__":
    main()
