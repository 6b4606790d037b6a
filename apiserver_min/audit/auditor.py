"""The auditor: the policy's decision for a request, and each stage's event handed to
every backend."""

from __future__ import annotations

import logging
from typing import Any, Protocol

from .event import RequestAudit
from .policy import NOT_RECORDED, Decision, Policy, RequestFacts

log = logging.getLogger("orch-apiserver.audit")


class Backend(Protocol):
    name: str  # the metrics' plugin label: log, webhook
    dropped: int  # events not delivered

    def process(self, event: dict[str, Any]) -> None:
        """Take one event; only a blocking-strict backend may raise (for RequestReceived)."""

    def start(self) -> None: ...

    async def shutdown(self) -> None: ...


class Auditor:
    def __init__(self, policy: Policy, backends: list[Backend]):
        self.policy = policy
        self.backends = backends
        self.events = 0

    def decide(self, facts: RequestFacts) -> Decision:
        if not self.backends:
            return NOT_RECORDED
        return self.policy.decide(facts)

    def emit(self, record: RequestAudit, stage: str) -> None:
        if not record.wants(stage):
            return
        event = record.event(stage)
        self.events += 1
        for backend in self.backends:
            backend.process(event)

    def start(self) -> None:
        for backend in self.backends:
            backend.start()

    async def shutdown(self) -> None:
        for backend in self.backends:
            try:
                await backend.shutdown()
            except Exception:  # noqa: BLE001 - one backend's failure must not stop the others' flush
                log.exception("audit backend shutdown failed")

    def render_metrics(self) -> list[str]:
        """Upstream's audit counters: events generated, and events a backend failed to deliver."""
        lines = [
            "# HELP apiserver_audit_event_total Counter of audit events generated and sent to the audit backend.",
            "# TYPE apiserver_audit_event_total counter",
            f"apiserver_audit_event_total {self.events}",
            "# HELP apiserver_audit_error_total Counter of audit events that failed to be audited properly.",
            "# TYPE apiserver_audit_error_total counter",
        ]
        lines += [f'apiserver_audit_error_total{{plugin="{b.name}"}} {b.dropped}' for b in self.backends]
        return lines
