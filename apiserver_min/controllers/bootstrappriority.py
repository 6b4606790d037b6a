"""The built-in PriorityClasses, created by every server at start when missing
(upstream's bootstrap-system-priority-classes hook), through a client acting as
the API server itself."""

from __future__ import annotations

import logging

from ..api import names
from ..api import status as st
from ..api.kinds import Registry
from ..client.informer import served_kind
from ..client.interface import Client

log = logging.getLogger("orch-apiserver.priority")


def system_priority_classes() -> list[dict]:
    return [
        {
            "metadata": {"name": name},
            "value": value,
            "globalDefault": False,
            "description": names.SYSTEM_PRIORITY_CLASS_DESCRIPTIONS[name],
        }
        for name, value in names.SYSTEM_PRIORITY_CLASSES.items()
    ]


async def ensure_system_priority_classes(client: Client, registry: Registry) -> list[str]:
    """Create the missing built-in classes; returns the names created. A class of that
    name with another value cannot be fixed (the value is immutable): it is reported."""
    kind = served_kind(registry, names.SCHEDULING_GROUP, "v1", "priorityclasses")
    created = []
    for pc in system_priority_classes():
        name = pc["metadata"]["name"]
        try:
            current = await client.get(kind, "", name)
        except st.ApiError as exc:
            if exc.code != 404:
                raise
            try:
                await client.create(kind, "", pc)
            except st.ApiError as exc2:
                if exc2.code != 409:
                    raise
                continue
            created.append(name)
            log.info("created PriorityClass %s with value %d", name, pc["value"])
            continue
        if current.get("value") != pc["value"]:
            log.warning("PriorityClass %s has value %s, expected %d", name, current.get("value"), pc["value"])
    return created
