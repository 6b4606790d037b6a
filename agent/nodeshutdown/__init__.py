"""Graceful node shutdown: systemd-logind's delay lock and the pods stopped by priority.

* :mod:`.logind` - the D-Bus side (inhibitor lock, InhibitDelayMaxUSec, PrepareForShutdown);
* :mod:`.manager` - the budgets, the priority groups and the shutdown itself.
"""

from __future__ import annotations

from .logind import Logind, LogindError, system_bus_address, write_inhibit_delay_dropin
from .manager import STATE_FILE as SHUTDOWN_STATE_FILE
from .manager import (
    ShutdownGroup,
    ShutdownManager,
    budgets_from_config,
    group_by_priority,
    mark_terminated,
    migrate_config,
    period_requested,
    pod_grace_period,
)

__all__ = [
    "SHUTDOWN_STATE_FILE",
    "Logind",
    "LogindError",
    "system_bus_address",
    "write_inhibit_delay_dropin",
    "ShutdownGroup",
    "ShutdownManager",
    "budgets_from_config",
    "group_by_priority",
    "mark_terminated",
    "migrate_config",
    "period_requested",
    "pod_grace_period",
]
