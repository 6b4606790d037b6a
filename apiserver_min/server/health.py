"""Health endpoints: /healthz, /livez, /readyz with named checks.

Machines read only the status code; ``?verbose`` prints one line per check
for operators, ``?exclude=<name>`` skips a check, and ``/livez/<name>`` runs
a single one.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Awaitable, Callable

from aiohttp import web


@dataclasses.dataclass
class Check:
    name: str
    run: Callable[[], Awaitable[str | None]]  # None = ok, else the failure reason
    post_start: bool = False  # livez tolerates it failing during the grace period


class Health:
    def __init__(self, livez_grace_period: float):
        self.started = time.monotonic()
        self.grace = livez_grace_period
        self.checks: dict[str, list[Check]] = {"healthz": [], "livez": [], "readyz": []}

    def add(self, check: Check, *, endpoints: tuple[str, ...] = ("healthz", "livez", "readyz")) -> None:
        for e in endpoints:
            self.checks[e].append(check)

    async def handle(self, request: web.Request, endpoint: str, single: str = "") -> web.Response:
        checks = self.checks[endpoint]
        in_grace = endpoint == "livez" and time.monotonic() - self.started < self.grace
        if single:
            for c in checks:
                if c.name == single:
                    reason = await _run(c)
                    if reason is None or (in_grace and c.post_start):
                        return web.Response(text="ok")
                    return web.Response(status=500, text=f"internal server error: {reason}\n")
            return web.Response(status=404, text="404 page not found\n")
        excluded = set(request.query.getall("exclude", []))
        verbose = "verbose" in request.query
        lines = []
        failed = []
        for c in checks:
            if c.name in excluded:
                lines.append(f"[+]{c.name} excluded: ok")
                excluded.discard(c.name)
                continue
            reason = await _run(c)
            if reason is None or (in_grace and c.post_start):
                lines.append(f"[+]{c.name} ok")
            else:
                lines.append(f"[-]{c.name} failed: reason withheld")
                failed.append((c.name, reason))
        for name in sorted(excluded):
            lines.append(f'warn: some health checks cannot be excluded: no matches for "{name}"')
        if failed:
            text = "\n".join(lines) + f"\n{endpoint} check failed\n"
            return web.Response(status=500, text=text)
        if verbose:
            return web.Response(text="\n".join(lines) + f"\n{endpoint} check passed\n")
        return web.Response(text="ok")


async def _run(c: Check) -> str | None:
    try:
        return await c.run()
    except Exception as exc:  # noqa: BLE001 - a failing check is a result, not a crash
        return str(exc) or type(exc).__name__
