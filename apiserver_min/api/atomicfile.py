"""Files written whole or not at all: a temporary file beside the target, fsynced,
then renamed over it, so a reader (kubectl, an agent, a second server, a restarted
process reading its checkpoint) sees the old file or the new one, never one still
being written. Shared by the server's PKI files and the agent's certificates and
checkpoints."""

from __future__ import annotations

import contextlib
import os

__all__ = ["write_atomic"]


def write_atomic(path: str, data: bytes, mode: int = 0o600) -> None:
    """Replace ``path`` with ``data``, the new file with permission bits ``mode``."""
    tmp = f"{path}.tmp-{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)  # whatever the umask took away
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
