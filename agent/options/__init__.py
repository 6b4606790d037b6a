"""The node agent's flags: their value types, the one table, the parser and the help text.

* :mod:`.flagtypes` - how a value is read from a flag and from the config file;
* :mod:`.table` - every flag declared once (:data:`OPTIONS`) and its indexes;
* :mod:`.parser` - the command line (Go pflag syntax) into :class:`ParsedArgs`;
* :mod:`.help` - ``--help``.
"""

from __future__ import annotations

from .flagtypes import (
    EVICTION_SIGNALS,
    FlagError,
    MemoryReservation,
    ShutdownGracePeriodByPodPriority,
    Taint,
    is_ip,
    parse_threshold_value,
)
from .help import format_help
from .parser import ParsedArgs, parse_args
from .table import BY_ATTR, BY_FIELD, BY_FLAG, CONFIG_DEPRECATION, GROUPS, OPTIONS, Option

__all__ = [
    "FlagError",
    "Option",
    "OPTIONS",
    "BY_FLAG",
    "BY_ATTR",
    "BY_FIELD",
    "GROUPS",
    "ParsedArgs",
    "parse_args",
    "format_help",
    "Taint",
    "MemoryReservation",
    "ShutdownGracePeriodByPodPriority",
    "EVICTION_SIGNALS",
    "parse_threshold_value",
    "CONFIG_DEPRECATION",
    "is_ip",
]
