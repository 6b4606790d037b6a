"""The topology manager: merges the resource managers' NUMA hints and admits or refuses pods."""

from .manager import (
    POLICIES,
    SCOPES,
    TOPOLOGY_AFFINITY_ERROR,
    TOPOLOGY_AFFINITY_MESSAGE,
    TopologyManager,
    TopologyManagerError,
)
from .merge import filter_provider_hints, merge_hints

__all__ = [
    "POLICIES",
    "SCOPES",
    "TOPOLOGY_AFFINITY_ERROR",
    "TOPOLOGY_AFFINITY_MESSAGE",
    "TopologyManager",
    "TopologyManagerError",
    "filter_provider_hints",
    "merge_hints",
]
