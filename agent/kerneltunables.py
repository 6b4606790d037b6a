"""``protectKernelDefaults``: the kernel tunables the node agent expects.

Upstream's agent wants these values; with ``protectKernelDefaults: true`` it
refuses to start when the running kernel differs, naming each one. Without it,
this agent leaves the kernel as it is (it never rewrites machine-wide
settings such as ``kernel.panic`` on its own).
"""

from __future__ import annotations

import os
from typing import Mapping

__all__ = ["EXPECTED", "differences"]

EXPECTED: Mapping[str, int] = {
    "vm/overcommit_memory": 1,
    "vm/panic_on_oom": 0,
    "kernel/panic": 10,
    "kernel/panic_on_oops": 1,
    "kernel/keys/root_maxkeys": 1000000,
    "kernel/keys/root_maxbytes": 25000000,
}


def differences(proc_sys: str = "/proc/sys") -> list[str]:
    """One message per expected tunable whose value differs (or cannot be read)."""
    out = []
    for key, want in EXPECTED.items():
        name = key.replace("/", ".")
        try:
            with open(os.path.join(proc_sys, key), encoding="ascii") as f:
                have = int(f.read().strip())
        except (OSError, ValueError) as exc:
            out.append(f"cannot read {name}: {exc}")
            continue
        if have != want:
            out.append(f"invalid kernel flag: {name}, expected value: {want}, actual value: {have}")
    return out
