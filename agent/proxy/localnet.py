"""The sysctl behind node ports on 127.0.0.0/8: ``net.ipv4.conf.all.route_localnet``.

The kernel routes packets with a 127/8 source or destination off the loopback
interface only with ``route_localnet=1``. The proxy sets it when it serves
localhost node ports (``--iptables-localhost-nodeports``, the default) and
records the value it found in ``<root-dir>/proxy_sysctls.json``, so that
``--proxy-cleanup`` (or a later start with the option off) puts back exactly
what was there - and leaves the sysctl alone when the proxy did not change it.
"""

from __future__ import annotations

import json
import os

__all__ = ["ROUTE_LOCALNET", "STATE_FILE", "SysctlError", "LocalnetSysctl"]

ROUTE_LOCALNET = "net/ipv4/conf/all/route_localnet"
STATE_FILE = "proxy_sysctls.json"


class SysctlError(RuntimeError):
    """A sysctl could not be read or written."""


class LocalnetSysctl:
    def __init__(self, state_dir: str, proc_sys: str = "/proc/sys") -> None:
        self.state_path = os.path.join(state_dir, STATE_FILE) if state_dir else ""
        self.path = os.path.join(proc_sys, ROUTE_LOCALNET)

    @property
    def name(self) -> str:
        return ROUTE_LOCALNET.replace("/", ".")

    def current(self) -> str:
        try:
            with open(self.path) as f:
                return f.read().strip()
        except OSError as exc:
            raise SysctlError(f"cannot read {self.name}: {exc}") from None

    def _write(self, value: str) -> None:
        try:
            with open(self.path, "w") as f:
                f.write(value)
        except OSError as exc:
            raise SysctlError(f"cannot set {self.name}={value}: {exc}") from None

    def recorded(self) -> str | None:
        """The value found before the proxy changed it, or None when it did not."""
        if not self.state_path:
            return None
        try:
            with open(self.state_path) as f:
                doc = json.load(f)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise SysctlError(f"cannot read {self.state_path}: {exc}") from None
        value = doc.get(self.name) if isinstance(doc, dict) else None
        return value if isinstance(value, str) else None

    def enable(self) -> bool:
        """Set it to 1; True if it was changed now (the old value is recorded first)."""
        if self.current() == "1":
            return False
        if self.state_path and self.recorded() is None:
            os.makedirs(os.path.dirname(self.state_path), exist_ok=True)
            tmp = self.state_path + ".tmp"
            with open(tmp, "w") as f:
                json.dump({self.name: self.current()}, f)
            os.replace(tmp, self.state_path)
        self._write("1")
        return True

    def restore(self) -> str | None:
        """Put back the recorded value if the proxy changed it; the value restored, or None."""
        old = self.recorded()
        if old is None:
            return None
        if self.current() == "1":
            self._write(old)
        os.unlink(self.state_path)
        return old
