"""CPU and NUMA node sets in the kernel's list format (``0-3,8,10-11``)."""

from __future__ import annotations

from typing import Iterable

__all__ = ["CpuSetError", "parse_cpuset", "format_cpuset"]


class CpuSetError(ValueError):
    """A cpuset text that is not in the kernel's list format."""


def parse_cpuset(text: str) -> frozenset[int]:
    """``"0-2,7"`` -> {0, 1, 2, 7}; the empty string is the empty set."""
    out: set[int] = set()
    text = text.strip()
    if not text:
        return frozenset()
    for part in text.split(","):
        part = part.strip()
        lo, sep, hi = part.partition("-")
        try:
            if sep:
                a, b = int(lo), int(hi)
                if a < 0 or b < a:
                    raise CpuSetError(f'invalid range "{part}" in cpuset "{text}"')
                out.update(range(a, b + 1))
            else:
                a = int(part)
                if a < 0:
                    raise CpuSetError(f'invalid cpu "{part}" in cpuset "{text}"')
                out.add(a)
        except ValueError as exc:
            if isinstance(exc, CpuSetError):
                raise
            raise CpuSetError(f'invalid cpuset "{text}": "{part}" is not a number or a range') from None
    return frozenset(out)


def format_cpuset(cpus: Iterable[int]) -> str:
    """{0, 1, 2, 7} -> ``"0-2,7"`` (sorted, ranges of consecutive ids)."""
    ids = sorted(set(cpus))
    parts: list[str] = []
    i = 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        parts.append(str(ids[i]) if i == j else f"{ids[i]}-{ids[j]}")
        i = j + 1
    return ",".join(parts)
