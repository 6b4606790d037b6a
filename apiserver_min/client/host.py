"""What the bundled controllers and the scheduler use of the server they run in.

The controllers read the watch cache and write through the generic store as
their own identities; this is the one seam they are given (constructor
argument), typed here so that no controller imports the server.
"""

from __future__ import annotations

from typing import Any, Protocol

from ..api.kinds import Registry
from ..authz.authorizer import Union
from ..authz.rbac import RbacIndex
from ..pki import Pki
from ..registry.store import Store
from ..storage.cacher import WatchCache


class ControllerHost(Protocol):
    opts: Any  # the server's Options (flags)
    registry: Registry
    store: Store
    cache: WatchCache
    authorizer: Union
    rbac_index: RbacIndex
    pki: Pki
