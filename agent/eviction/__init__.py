"""The eviction manager: pressure conditions, node-level reclaim and pod eviction (see :mod:`.manager`)."""

from .manager import (
    POD_CLEANUP_TIMEOUT,
    EvictionConfig,
    EvictionManager,
    eviction_message,
    evictor,
    is_critical_pod,
    mark_evicted,
)
from .thresholds import Threshold, ThresholdError, ThresholdValue, parse_thresholds

__all__ = [
    "EvictionConfig",
    "EvictionManager",
    "Threshold",
    "ThresholdError",
    "ThresholdValue",
    "eviction_message",
    "evictor",
    "is_critical_pod",
    "mark_evicted",
    "POD_CLEANUP_TIMEOUT",
    "parse_thresholds",
]
