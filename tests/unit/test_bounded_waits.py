"""Bounded waits in product code end when their task is cancelled.

On Python 3.11 ``asyncio.wait_for`` returns the awaited result when a cancellation
arrives in the same moment the awaited call completes, and the cancelled task runs
on; a component being stopped then never ends. Product code bounds its waits with
``async with asyncio.timeout(...)`` instead.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from agent.sources.file import FileSource
from agent.sources.merge import PodConfig

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("agent", "apiserver_min", "cri")
# file (relative to the repository) -> why its wait_for keeps the cancellation; none today.
ALLOWED: dict[str, str] = {}
WAIT_FOR = re.compile(r"\basyncio\.wait_for\b|from\s+asyncio\s+import\s[^\n]*\bwait_for\b")


async def test_a_stop_arriving_as_the_bounded_wait_completes_ends_the_loop(tmp_path):
    # The static pod file source waits for a wake-up bounded by its period. Wake it and
    # stop it a few loop steps apart; whichever step the cancellation lands on, the
    # task must end (with wait_for, one of these steps lost it and the loop ran on).
    for steps in range(6):
        config = PodConfig("node-a")
        source = FileSource(str(tmp_path), "node-a", 3600.0, config)
        source.inotify = False
        task = asyncio.create_task(source.run(), name="test-file-source")
        async with asyncio.timeout(5):
            await config.updates.get()  # the first read is done: the loop now waits
        assert source._wake is not None
        source._wake.set()
        for _ in range(steps):
            await asyncio.sleep(0)
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=5)
        assert task in done and task.cancelled(), f"the source ran on after a stop {steps} loop steps after its wake-up"


def test_product_code_bounds_waits_with_asyncio_timeout():
    found = []
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            rel = str(path.relative_to(REPO))
            if rel not in ALLOWED and WAIT_FOR.search(path.read_text()):
                found.append(rel)
    assert found == [], (
        "use `async with asyncio.timeout(...)`, not asyncio.wait_for (on Python 3.11 it can lose a "
        f"cancellation and leave a stopped component running), or allow the file with a reason: {found}"
    )
