"""PersistentVolumeLabel: deprecated upstream (it labelled volumes of the in-tree cloud
providers with their zone and region) and without effect here, since no cloud
provider is built in. Enabling it is accepted, as upstream accepts it, and the
server says at start that it does nothing."""

from __future__ import annotations

import logging
from typing import Any

from ..chain import Attributes

log = logging.getLogger("orch-apiserver.admission")

DEPRECATION_WARNING = (
    "admission plugin PersistentVolumeLabel is deprecated and does nothing in this server "
    "(it labels volumes of built-in cloud providers, and there are none); remove it from --enable-admission-plugins"
)


class PersistentVolumeLabel:
    name = "PersistentVolumeLabel"
    # Nothing to act on: the chain never calls it.
    resources: frozenset[tuple[str, str]] = frozenset()

    def __init__(self) -> None:
        log.warning(DEPRECATION_WARNING)

    async def admit(self, attrs: Attributes) -> None:
        return None

    async def validate(self, attrs: Attributes) -> None:
        return None


def plugin(server: Any) -> PersistentVolumeLabel:
    return PersistentVolumeLabel()
