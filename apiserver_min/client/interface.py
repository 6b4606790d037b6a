"""The one client interface the bundled controllers and the scheduler write through.

Objects are plain dicts, kinds are the registry's ``KindInfo``, failures are
``api.status.ApiError`` (403 when the client's identity may not, 404, 409, 422 as a
remote client would see them). Reading is done through informers over the watch
cache (``client/informer.py``), never through this interface in a hot loop.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable, Protocol, Union

from ..api.kinds import KindInfo
from ..api.user import UserInfo
from ..registry.rest import DeleteOptions

__all__ = ["Client", "DeleteOptions", "Mutate"]

# A function from the current object to the new one: read-modify-write, called again
# on a fresh copy whenever another writer got in first. It may be async.
Mutate = Callable[[dict], Union[dict, Awaitable[dict]]]


class Client(Protocol):
    """get, list, create, update, patch and delete, as one identity."""

    user: UserInfo
    field_manager: str

    async def get(self, kind: KindInfo, namespace: str, name: str, *, subresource: str = "") -> dict:
        """An object; with ``subresource="scale"`` on a scalable kind, its ``autoscaling/v1`` Scale."""
        ...

    async def list(
        self, kind: KindInfo, namespace: str | None = None, label_selector: str = "", field_selector: str = ""
    ) -> list[dict]: ...

    async def create(self, kind: KindInfo, namespace: str, obj: dict, *, subresource: str = "") -> dict:
        """A new object; with ``subresource="binding"`` on pods, ``obj`` is the Binding."""
        ...

    async def update(
        self, kind: KindInfo, namespace: str, name: str, obj_or_mutate: dict | Mutate, *, subresource: str = ""
    ) -> dict:
        """An object: replaced if its ``metadata.resourceVersion`` is still current (409
        otherwise). A function old -> new: applied to the current object, retried on
        conflict until it lands. With ``subresource="scale"``, ``obj_or_mutate`` is a
        Scale (or a function of the current Scale) whose ``spec.replicas`` is written."""
        ...

    async def patch(
        self, kind: KindInfo, namespace: str, name: str, patch: Any, patch_type: str, *, subresource: str = ""
    ) -> dict:
        """``patch_type`` is a media type: merge, strategic merge or JSON patch."""
        ...

    async def delete(self, kind: KindInfo, namespace: str, name: str, options: DeleteOptions | None = None) -> dict:
        """The object as last stored (terminating, or gone)."""
        ...
