"""Small helpers the test files share: one of each, so they behave the same everywhere."""

from __future__ import annotations

import shutil
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Callable, TypeVar

T = TypeVar("T")


def uniq(prefix: str = "t") -> str:
    """A name no other test uses: ``prefix`` and 8 random hex digits (a valid DNS label)."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def wait_for(predicate: Callable[[], T], timeout: float = 10.0, what: str = "condition", interval: float = 0.05) -> T:
    """``predicate()`` until it returns something truthy, which is returned; after
    ``timeout`` seconds an AssertionError naming ``what`` and the last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {value!r})")
        time.sleep(interval)


def console_script(name: str) -> Path:
    """The project's console script ``name`` (``orch-apiserver``, ``orch-agent``): the one
    installed beside the running interpreter (its virtual environment), else the one on PATH.
    The path beside the interpreter is returned when neither exists, for the skip message."""
    beside = Path(sys.executable).parent / name
    if beside.exists():
        return beside
    found = shutil.which(name)
    return Path(found) if found is not None else beside


def require_binary(name: str, package: str) -> str:
    """The path of the executable ``name``, or a skip naming the Debian package that has it."""
    import pytest

    found = shutil.which(name)
    if found is None:
        pytest.skip(f"{name} not on PATH (Debian package {package})")
    return found


__all__: list[Any] = ["console_script", "require_binary", "uniq", "wait_for"]
