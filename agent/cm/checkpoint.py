"""Checkpoint files of the resource managers (``cpu_manager_state``, ``memory_manager_state``).

The JSON shape is upstream's: the manager's fields plus a ``checksum`` over them.
The checksum here is FNV-1a (32 bits) of the canonical JSON of the other fields
(keys sorted, no spaces), so a file edited by hand is detected as corrupt. Files
are replaced atomically (write to a temporary file, fsync, rename).
"""

from __future__ import annotations

import json
import os
from typing import Any

from apiserver_min.api.atomicfile import write_atomic

__all__ = [
    "CheckpointError",
    "checksum",
    "fnv32a",
    "read_checkpoint",
    "restore_checkpoint",
    "write_atomic",
    "write_checkpoint",
]


class CheckpointError(RuntimeError):
    pass


def fnv32a(data: bytes) -> int:
    """FNV-1a, 32 bits: the checksum of every checkpoint file of the agent."""
    h = 0x811C9DC5
    for b in data:
        h ^= b
        h = (h * 0x01000193) & 0xFFFFFFFF
    return h


def checksum(data: dict[str, Any]) -> int:
    body = {k: v for k, v in data.items() if k != "checksum"}
    return fnv32a(json.dumps(body, sort_keys=True, separators=(",", ":")).encode())


def read_checkpoint(path: str) -> dict[str, Any] | None:
    """The checkpoint's fields, or None when there is no file; CheckpointError when it is corrupt."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CheckpointError(f"cannot read the checkpoint {path}: {exc.strerror or exc}") from None
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise CheckpointError(f"checkpoint {path} is corrupted: {exc}") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"checkpoint {path} is corrupted: not a JSON object")
    if data.get("checksum") != checksum(data):
        raise CheckpointError(f"checkpoint {path} is corrupted: checksum mismatch")
    return data


def restore_checkpoint(path: str, policy: str) -> dict[str, Any] | None:
    """The checkpoint written under ``policy``, or None when there is none.

    CheckpointError (upstream's wording) when it is corrupt or was written under another policy.
    """
    try:
        data = read_checkpoint(path)
    except CheckpointError as exc:
        raise CheckpointError(f"could not restore state from checkpoint: {exc}") from None
    if data is not None and str(data.get("policyName") or "") != policy:
        raise CheckpointError(
            f'could not restore state from checkpoint: configured policy "{policy}" differs from state checkpoint '
            f'policy "{data.get("policyName") or ""}"'
        )
    return data


def write_checkpoint(path: str, data: dict[str, Any]) -> None:
    body = {k: v for k, v in data.items() if k != "checksum"}
    body["checksum"] = checksum(body)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    write_atomic(path, json.dumps(body, separators=(",", ":")).encode())
