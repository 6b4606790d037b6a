"""The eviction manager: pressure conditions, node-level reclaim and pod eviction (see :mod:`.manager`)."""

from .manager import EvictionConfig, EvictionManager, eviction_message, is_critical_pod
from .thresholds import Threshold, ThresholdError, ThresholdValue, parse_thresholds

__all__ = [
    "EvictionConfig",
    "EvictionManager",
    "Threshold",
    "ThresholdError",
    "ThresholdValue",
    "eviction_message",
    "is_critical_pod",
    "parse_thresholds",
]
