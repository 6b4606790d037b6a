"""A systemd-logind stand-in on a private D-Bus daemon, for the graceful shutdown tests.

These machines do not boot systemd, so the tests start ``dbus-daemon`` (Debian
``dbus``) on a socket of their own and this small service on it. It owns
``org.freedesktop.login1`` and ``org.freedesktop.systemd1`` and answers what
the node agent asks:

* ``Inhibit(what, who, why, mode)``: a real pipe; the caller gets the write end,
  the stand-in watches the read end and records when the lock is released
  (the end is closed), as logind does with its FIFO;
* ``ListInhibitors``, the ``InhibitDelayMaxUSec`` property (``Properties.Get``);
* systemd's ``KillUnit(systemd-logind.service, all, SIGHUP)``: re-reads
  ``InhibitDelayMaxSec`` from the drop-in directory it was given;
* ``PrepareForShutdown(bool)``, emitted on a line ``shutdown true|false`` on stdin.

Every step is one JSON line in the ``--record`` file; :class:`PrivateLogind`
runs the daemon and the stand-in as a context manager.

Run: ``python -m tests.logind_standin --address unix:path=... --record FILE``.
"""

import argparse
import asyncio
import configparser
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from dbus_fast import Message, MessageType
from dbus_fast.aio import MessageBus
from dbus_fast.service import PropertyAccess, ServiceInterface, dbus_property, method
from dbus_fast.service import signal as dbus_signal

from apiserver_min.api import names
from tests.components import REPO_ROOT


class _Recorder:
    def __init__(self, path: str) -> None:
        self.path = path

    def __call__(self, event: str, **kv: Any) -> None:
        with open(self.path, "a") as f:
            f.write(json.dumps({"event": event, "time": time.time(), **kv}) + "\n")


class LoginManager(ServiceInterface):
    def __init__(self, record: _Recorder, delay_usec: int) -> None:
        super().__init__(names.LOGIND_MANAGER_INTERFACE)
        self.record = record
        self.delay_usec = delay_usec
        self.inhibitors: dict[int, tuple[str, str, str, str]] = {}  # read end -> (what, who, why, mode)

    def inhibit(self, bus: MessageBus, msg: Message) -> bool:
        """``Inhibit`` as a raw handler: the write end of a pipe goes to the caller, and
        our copy is closed once the reply is written, so the caller's close is the release."""
        if not (
            msg.message_type == MessageType.METHOD_CALL
            and msg.interface == names.LOGIND_MANAGER_INTERFACE
            and msg.member == "Inhibit"
            and msg.path == names.LOGIND_OBJECT_PATH
        ):
            return False
        what, who, why, mode = msg.body
        r, w = os.pipe()
        self.inhibitors[r] = (what, who, why, mode)
        self.record("inhibit", what=what, who=who, why=why, mode=mode)
        asyncio.get_running_loop().add_reader(r, self._released, r)
        sent = bus.send(Message.new_method_return(msg, "h", [0], unix_fds=[w]))
        sent.add_done_callback(lambda _: os.close(w))
        return True

    def _released(self, r: int) -> None:
        asyncio.get_running_loop().remove_reader(r)
        what, who, why, mode = self.inhibitors.pop(r)
        os.close(r)
        self.record("release", what=what, who=who, mode=mode)

    @method()
    def ListInhibitors(self) -> "a(ssssuu)":  # noqa: F821 - D-Bus signatures
        return [[what, who, why, mode, 0, 0] for what, who, why, mode in self.inhibitors.values()]

    @dbus_property(access=PropertyAccess.READ)
    def InhibitDelayMaxUSec(self) -> "t":  # noqa: F821 - D-Bus signatures
        return self.delay_usec

    @dbus_signal()
    def PrepareForShutdown(self, active: bool) -> "b":  # noqa: F821 - D-Bus signatures
        return active


class SystemdManager(ServiceInterface):
    def __init__(self, record: _Recorder, login: LoginManager, dropin_dir: str) -> None:
        super().__init__(names.SYSTEMD_MANAGER_INTERFACE)
        self.record = record
        self.login = login
        self.dropin_dir = dropin_dir

    @method()
    def KillUnit(self, unit: "s", who: "s", sig: "i") -> None:  # noqa: F821 - D-Bus signatures
        self.record("killunit", unit=unit, who=who, signal=sig)
        if unit != names.LOGIND_SERVICE_UNIT or sig != signal.SIGHUP:
            return
        # logind reads InhibitDelayMaxSec from its drop-ins on SIGHUP (the last file wins).
        for path in sorted(Path(self.dropin_dir).glob("*.conf")):
            parser = configparser.ConfigParser()
            parser.read(path)
            value = parser.get("Login", "InhibitDelayMaxSec", fallback=None)
            if value is not None:
                self.login.delay_usec = int(float(value) * 1_000_000)
        self.record("reloaded", delay_usec=self.login.delay_usec)


async def _serve(args: argparse.Namespace) -> None:
    record = _Recorder(args.record)
    bus = await MessageBus(bus_address=args.address, negotiate_unix_fd=True).connect()
    login = LoginManager(record, args.delay_usec)
    bus.add_message_handler(lambda msg: login.inhibit(bus, msg))
    bus.export(names.LOGIND_OBJECT_PATH, login)
    bus.export(names.SYSTEMD_OBJECT_PATH, SystemdManager(record, login, args.dropin_dir))
    await bus.request_name(names.LOGIND_BUS_NAME)
    await bus.request_name(names.SYSTEMD_BUS_NAME)
    record("ready")
    print("ready", flush=True)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while True:
        line = (await reader.readline()).decode().strip()
        if not line:
            return
        if line in ("shutdown true", "shutdown false"):
            active = line.endswith("true")
            login.PrepareForShutdown(active)
            record("signal", active=active)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--address", required=True)
    p.add_argument("--record", required=True)
    p.add_argument("--delay-usec", type=int, default=5_000_000)  # logind's default InhibitDelayMaxSec=5
    p.add_argument("--dropin-dir", required=True)
    asyncio.run(_serve(p.parse_args()))


# --- the fixture side -------------------------------------------------------------------


def dbus_daemon() -> str | None:
    return shutil.which("dbus-daemon")


class PrivateLogind:
    """A private ``dbus-daemon`` with the stand-in on it; ``address`` is for
    ``DBUS_SYSTEM_BUS_ADDRESS``."""

    def __init__(self, work: Path, *, delay_usec: int = 5_000_000) -> None:
        self.work = Path(tempfile.mkdtemp(prefix="logind-", dir=work))
        self.socket = self.work / "bus"
        self.address = f"unix:path={self.socket}"
        self.record_path = self.work / "record.jsonl"
        self.dropin_dir = self.work / "logind.conf.d"
        self.delay_usec = delay_usec
        self.daemon: subprocess.Popen | None = None
        self.standin: subprocess.Popen | None = None

    def __enter__(self) -> "PrivateLogind":
        self.dropin_dir.mkdir()
        self.daemon = subprocess.Popen(
            ["dbus-daemon", "--session", f"--address={self.address}", "--nofork", "--nopidfile", "--nosyslog"],
            stdout=subprocess.DEVNULL,
            stderr=open(self.work / "dbus-daemon.log", "w"),
        )
        deadline = time.monotonic() + 10
        while not self.socket.exists():
            if time.monotonic() > deadline or self.daemon.poll() is not None:
                raise RuntimeError(f"dbus-daemon did not start: {(self.work / 'dbus-daemon.log').read_text()}")
            time.sleep(0.02)
        self.standin = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.logind_standin",
                f"--address={self.address}",
                f"--record={self.record_path}",
                f"--delay-usec={self.delay_usec}",
                f"--dropin-dir={self.dropin_dir}",
            ],
            cwd=REPO_ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=open(self.work / "standin.log", "w"),
            text=True,
        )
        assert self.standin.stdout is not None
        line = self.standin.stdout.readline().strip()
        if line != "ready":
            self.__exit__()
            raise RuntimeError(f"logind stand-in did not start: {(self.work / 'standin.log').read_text()}")
        return self

    def __exit__(self, *exc: object) -> None:
        for proc in (self.standin, self.daemon):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(5)

    def prepare_for_shutdown(self, active: bool) -> None:
        assert self.standin is not None and self.standin.stdin is not None
        self.standin.stdin.write(f"shutdown {'true' if active else 'false'}\n")
        self.standin.stdin.flush()

    def records(self, event: str | None = None) -> list[dict]:
        if not self.record_path.exists():
            return []
        out = [json.loads(line) for line in self.record_path.read_text().splitlines() if line.strip()]
        return [r for r in out if event is None or r["event"] == event]

    def held_locks(self) -> int:
        return len(self.records("inhibit")) - len(self.records("release"))

    def wait(self, predicate, timeout: float, what: str) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = predicate()
            if got:
                return got
            time.sleep(0.05)
        raise AssertionError(f"timed out after {timeout}s waiting for {what}; records={self.records()}")


if __name__ == "__main__":
    main()
