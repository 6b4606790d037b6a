"""systemd-logind over the system bus, as the node shutdown manager needs it.

Four things, each one D-Bus exchange (``dbus-fast``, asyncio, with unix fd
passing negotiated, since ``Inhibit`` answers with a file descriptor):

* read ``InhibitDelayMaxUSec`` (how long logind waits for delay locks);
* raise it: a drop-in ``InhibitDelayMaxSec=`` file in logind's configuration
  directory, then ``KillUnit(systemd-logind.service, all, SIGHUP)`` on
  systemd's manager, which makes logind re-read its configuration;
* take a *delay* inhibitor lock for ``shutdown`` (the lock is the descriptor;
  closing it releases the lock);
* receive ``PrepareForShutdown(bool)``.

The bus is the one ``DBUS_SYSTEM_BUS_ADDRESS`` names, else the standard
system bus socket; tests point the variable at a private bus.
"""

from __future__ import annotations

import asyncio
import os
import types
from typing import TYPE_CHECKING, Any, Callable

from apiserver_min.api import names

from .. import logging as agent_logging

if TYPE_CHECKING:
    from dbus_fast import Message
    from dbus_fast.aio import MessageBus

__all__ = ["LogindError", "Logind", "system_bus_address", "write_inhibit_delay_dropin"]

_PROPERTIES = "org.freedesktop.DBus.Properties"
_DBUS = "org.freedesktop.DBus"
_SIGHUP = 1
PREPARE_FOR_SHUTDOWN = "PrepareForShutdown"
CALL_TIMEOUT = 10.0

log = agent_logging.get_logger("nodeshutdown")


class LogindError(RuntimeError):
    """A logind (or bus) exchange failed; the message says which and why."""


def system_bus_address(environ: dict[str, str] | None = None) -> str:
    env = os.environ if environ is None else environ
    return env.get(names.ENV_DBUS_SYSTEM_BUS_ADDRESS) or names.DBUS_DEFAULT_SYSTEM_BUS_ADDRESS


def write_inhibit_delay_dropin(seconds: float, directory: str = names.SHUTDOWN_LOGIND_DROPIN_DIR) -> str:
    """Write logind's drop-in raising ``InhibitDelayMaxSec``; return its path."""
    os.makedirs(directory, mode=0o755, exist_ok=True)
    path = os.path.join(directory, names.SHUTDOWN_LOGIND_DROPIN_FILE)
    text = f"# Written by {names.AGENT_NAME} (shutdownGracePeriod)\n[Login]\nInhibitDelayMaxSec={seconds:.0f}\n"
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
    return path


class Logind:
    """One connection to the system bus for logind's manager."""

    def __init__(self, address: str | None = None, *, timeout: float = CALL_TIMEOUT) -> None:
        self.address = address or system_bus_address()
        self.timeout = timeout
        self._bus: MessageBus | None = None
        self._dbus: types.ModuleType | None = None  # dbus_fast, once connect() loaded it
        self._on_shutdown: Callable[[bool], None] | None = None

    # --- connection --------------------------------------------------------------------

    async def connect(self) -> None:
        # The D-Bus client (about 4 MB with its compiled parts) is loaded by the first
        # connection: an agent without a shutdown grace period never opens the bus.
        import dbus_fast
        import dbus_fast.aio

        self._dbus = dbus_fast
        bus = None
        try:
            bus = dbus_fast.aio.MessageBus(bus_address=self.address, negotiate_unix_fd=True)
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for loses a cancellation that
            # arrives as the call completes, and the cancelled manager would then run on.
            async with asyncio.timeout(self.timeout):
                self._bus = await bus.connect()
        except Exception as exc:  # noqa: BLE001 - the library raises OSError, timeouts and plain Exception
            if bus is not None:
                try:
                    bus.disconnect()
                except Exception:  # noqa: BLE001 - a half-open connection may not close cleanly
                    pass
            why = "no answer" if isinstance(exc, asyncio.TimeoutError) else _why(exc)
            raise LogindError(f"cannot connect to the system bus at {self.address}: {why}") from None

    @property
    def bus(self) -> MessageBus:
        if self._bus is None:
            raise LogindError("not connected to the system bus")
        return self._bus

    async def wait_disconnected(self) -> None:
        """Return when the bus connection ends (the bus or logind's side went away)."""
        try:
            await self.bus.wait_for_disconnect()
        except Exception:  # noqa: BLE001 - an abrupt end is an end as well
            pass

    def close(self) -> None:
        if self._bus is not None:
            self._bus.disconnect()
            self._bus = None

    async def _call(
        self, destination: str, path: str, interface: str, member: str, signature: str, body: list[Any]
    ) -> Message:
        bus, dbus = self.bus, self._dbus
        assert dbus is not None  # set by connect(), before self.bus can be
        msg = dbus.Message(
            destination=destination, path=path, interface=interface, member=member, signature=signature, body=body
        )
        try:
            async with asyncio.timeout(self.timeout):  # not wait_for: see connect()
                reply = await bus.call(msg)
        except asyncio.TimeoutError:
            raise LogindError(f"{interface}.{member}: no answer within {self.timeout:g}s") from None
        except LogindError:
            raise
        except Exception as exc:  # noqa: BLE001 - connection errors come as plain exceptions
            raise LogindError(f"{interface}.{member}: {_why(exc)}") from None
        if reply.message_type == dbus.MessageType.ERROR:
            for fd in reply.unix_fds:
                os.close(fd)
            text = reply.body[0] if reply.body else ""
            raise LogindError(f"{interface}.{member}: {reply.error_name}: {text}".rstrip(": "))
        return reply

    # --- logind -------------------------------------------------------------------------

    async def inhibit_delay_max(self) -> float:
        """logind's ``InhibitDelayMaxUSec``, in seconds."""
        reply = await self._call(
            names.LOGIND_BUS_NAME,
            names.LOGIND_OBJECT_PATH,
            _PROPERTIES,
            "Get",
            "ss",
            [names.LOGIND_MANAGER_INTERFACE, "InhibitDelayMaxUSec"],
        )
        variant = reply.body[0] if reply.body else None
        value = getattr(variant, "value", None)
        if getattr(variant, "signature", "") != "t" or not isinstance(value, int):
            raise LogindError("InhibitDelayMaxUSec from logind is not a uint64 as expected")
        return value / 1_000_000

    async def inhibit_shutdown(self) -> int:
        """Take a delay inhibitor lock for shutdown; the answer is the lock's descriptor."""
        reply = await self._call(
            names.LOGIND_BUS_NAME,
            names.LOGIND_OBJECT_PATH,
            names.LOGIND_MANAGER_INTERFACE,
            "Inhibit",
            "ssss",
            ["shutdown", names.SHUTDOWN_INHIBIT_WHO, names.SHUTDOWN_INHIBIT_WHY, "delay"],
        )
        fds = list(reply.unix_fds)
        index = reply.body[0] if reply.body else None
        if not isinstance(index, int) or not 0 <= index < len(fds):
            for fd in fds:
                os.close(fd)
            raise LogindError("failed creating shutdown inhibitor: logind's answer carried no file descriptor")
        lock = fds.pop(index)
        for fd in fds:
            os.close(fd)
        return lock

    @staticmethod
    def release(lock: int) -> None:
        """Release an inhibitor lock (close its descriptor)."""
        os.close(lock)

    async def reload_logind(self) -> None:
        """Ask systemd to send logind SIGHUP, so it re-reads its configuration."""
        await self._call(
            names.SYSTEMD_BUS_NAME,
            names.SYSTEMD_OBJECT_PATH,
            names.SYSTEMD_MANAGER_INTERFACE,
            "KillUnit",
            "ssi",
            [names.LOGIND_SERVICE_UNIT, "all", _SIGHUP],
        )

    async def watch_shutdown(self, callback: Callable[[bool], None]) -> None:
        """Call ``callback(active)`` on every ``PrepareForShutdown`` signal from now on."""
        rule = (
            f"type='signal',sender='{names.LOGIND_BUS_NAME}',interface='{names.LOGIND_MANAGER_INTERFACE}',"
            f"member='{PREPARE_FOR_SHUTDOWN}',path='{names.LOGIND_OBJECT_PATH}'"
        )
        self._on_shutdown = callback
        self.bus.add_message_handler(self._handle)
        await self._call(_DBUS, "/org/freedesktop/DBus", _DBUS, "AddMatch", "s", [rule])

    def _handle(self, msg: Message) -> None:
        if (
            self._dbus is None
            or msg.message_type != self._dbus.MessageType.SIGNAL
            or msg.member != PREPARE_FOR_SHUTDOWN
            or msg.interface != names.LOGIND_MANAGER_INTERFACE
            or msg.path != names.LOGIND_OBJECT_PATH
            or self._on_shutdown is None
        ):
            return
        if not msg.body or not isinstance(msg.body[0], bool):
            log.error("Failed obtaining shutdown event: PrepareForShutdown carried no boolean", body=repr(msg.body))
            return
        self._on_shutdown(msg.body[0])


def _why(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
