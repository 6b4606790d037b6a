"""Garbage collection of the node's images and dead containers (upstream's image and container GC)."""

from .containergc import CONTAINER_GC_PERIOD, ContainerGC, ContainerGCPolicy
from .gc import IMAGE_GC_PERIOD, ImageGCError, ImageGCManager, ImageGCPolicy, image_fs_usage

__all__ = [
    "CONTAINER_GC_PERIOD",
    "ContainerGC",
    "ContainerGCPolicy",
    "IMAGE_GC_PERIOD",
    "ImageGCError",
    "ImageGCManager",
    "ImageGCPolicy",
    "image_fs_usage",
]
