"""The memory manager (``--memory-manager-policy``): NUMA-placed memory and huge pages."""

from .manager import STATE_FILE, MemoryManager, MemoryManagerError, container_memory
from .numa import NumaMemoryError, read_numa_memory

__all__ = [
    "MemoryManager",
    "MemoryManagerError",
    "NumaMemoryError",
    "STATE_FILE",
    "container_memory",
    "read_numa_memory",
]
