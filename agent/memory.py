"""Giving freed heap memory back to the system.

Start-up (imports, configuration, the first sync) frees a good deal of what it
allocated, but the C allocator keeps those pages mapped in the middle of its heap,
where they count in the agent's resident size for its whole life. glibc's
``malloc_trim(0)`` returns every whole free page in the heap, not only the top, to
the kernel; the agent calls it once when ready and then now and then from the sync
loop, after pods came and went. Other C libraries have no such call: there it does
nothing.
"""

from __future__ import annotations

import ctypes
import gc
import time

# How often the sync loop trims (seconds): a pass over a ~40 MB heap takes about a
# millisecond; pod churn between passes leaves at most this long's worth of free pages.
TRIM_PERIOD = 30.0


def _malloc_trim() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    try:
        fn = ctypes.CDLL(None).malloc_trim  # the symbols the process already has
    except (OSError, AttributeError):  # not glibc
        return None
    fn.argtypes = [ctypes.c_size_t]
    fn.restype = ctypes.c_int
    return fn


_TRIM = _malloc_trim()


def release_free_memory(collect: bool = False) -> float:
    """Return the allocator's free pages to the system; the seconds it took.

    ``collect`` first runs a full garbage collection (once after start-up: the
    cycles left by imports are freed before the pages are handed back).
    """
    t0 = time.perf_counter()
    if collect:
        gc.collect()
    if _TRIM is not None:
        _TRIM(0)
    return time.perf_counter() - t0
