"""agent.memory: freed heap pages in the middle of the C heap go back to the system;
and the agent does not load big libraries a node without their features does not use."""

from __future__ import annotations

import ast
import gc
import subprocess
import sys
import weakref
from pathlib import Path

import psutil
import pytest

from agent import memory

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(memory._TRIM is None, reason="needs glibc's malloc_trim")
def test_release_returns_pages_freed_below_the_heap_top():
    proc = psutil.Process()
    blocks = [bytearray(2048) for _ in range(20_000)]  # ~40 MB of heap chunks (malloc, not pymalloc)
    pin = bytearray(2048)  # allocated last: keeps the heap's top in use, so free() alone cannot shrink it
    del blocks
    before = proc.memory_info().rss
    took = memory.release_free_memory()
    after = proc.memory_info().rss
    assert before - after > 20 * 2**20, (before, after)
    assert took >= 0
    del pin


class _Node:
    other: _Node | None = None


def test_collect_frees_cycles_first():
    gc.disable()
    try:
        a, b = _Node(), _Node()
        a.other, b.other = b, a
        ref = weakref.ref(a)
        del a, b
        assert ref() is not None  # a cycle: only the collector frees it
        memory.release_free_memory(collect=True)
        assert ref() is None
    finally:
        gc.enable()


# Libraries a standalone node (static pods, its own HTTPS port, no API server) does not
# use, each several MB resident: loaded only by the features that need them.
NOT_FOR_A_STANDALONE_NODE = ("cryptography", "pyroute2", "dbus_fast", "aetcd")


def test_the_agent_loads_no_library_a_standalone_node_does_not_use():
    code = (
        "import sys, agent.cli, agent.process, agent.node, agent.server.server; "
        "print(sorted({m.split('.')[0] for m in sys.modules}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO).stdout
    loaded = set(ast.literal_eval(out.strip()))
    assert loaded.isdisjoint(NOT_FOR_A_STANDALONE_NODE), sorted(loaded & set(NOT_FOR_A_STANDALONE_NODE))
