"""REST objects: what a kind's collection or sub-resource does beyond the generic store.

The HTTP layer decodes a request body once (JSON, YAML or protobuf; field
validation; the apiVersion, also in an alias group's spelling), negotiates the
reply and encodes it; in between it calls the REST object registered for the
request, which gets decoded dicts and returns objects. A REST object implements
the verbs it serves, one protocol each:

- :class:`Creater` (POST to a collection or a sub-resource: bindings, evictions,
  token requests, the reviews),
- :class:`Lister` (a collection served without stored objects),
- :class:`Getter`, :class:`Updater` and :class:`Patcher` (a sub-resource that shows
  its object in another form, e.g. ``scale``),
- :class:`Connecter` (a stream that needs the raw HTTP request: ``pods/log``,
  ``exec``, ``attach``, ``portforward``),
- :class:`StoreSubresource` (``status`` and its kin: the object itself, read and
  written through the generic store, which lets the strategy decide what a write
  of that sub-resource may change).

Each declared sub-resource (``api.kinds.Subresource.rest``) names its
implementation; :class:`RestTable` is built from those declarations, so serving a
sub-resource is a lookup.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Mapping, Protocol, runtime_checkable

from ..api.kinds import KindInfo, Registry, Subresource
from ..api.user import UserInfo

if TYPE_CHECKING:
    from ..admission.chain import Chain


@dataclasses.dataclass
class DeleteOptions:
    grace_period_seconds: int | None = None
    propagation_policy: str | None = None
    preconditions_uid: str | None = None
    preconditions_rv: str | None = None
    dry_run: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class RequestContext:
    """The facts of one request a REST object works with (already authenticated,
    authorized and decoded)."""

    user: UserInfo
    kind: KindInfo | None  # the kind whose collection or object the path names (None: an alias-only path)
    verb: str
    namespace: str = ""
    name: str = ""
    subresource: str = ""
    version: str = ""  # the version the path named (an alias group may serve older ones)
    requested_group: str = ""  # the group as the client spelled it (an alias of kind.group, or kind.group)
    dry_run: bool = False
    field_manager: str = ""
    field_validation: str = "Warn"
    query: Mapping[str, str] = dataclasses.field(default_factory=dict)
    # Authorizes this request again as another verb (a compound check: opening an exec
    # stream with GET is also a create); None where the caller already decided.
    authorize_as: Callable[[str], Awaitable[None]] | None = None


class ObjectStore(Protocol):
    """What REST objects use of the generic store (``registry.store.Store``)."""

    registry: Registry
    admission: "Chain"

    async def get_object(self, kind: KindInfo, namespace: str, name: str) -> dict: ...

    async def list(
        self,
        kind: KindInfo,
        namespace: str | None,
        labels: Any,
        fields: Any,
        rv: str | None,
        rv_match: str | None,
        limit: int,
        cont: str | None,
    ) -> Any:
        """A ``ListResult``: ``items`` are (stored bytes, revision) pairs."""
        ...

    async def update(
        self,
        kind: KindInfo,
        namespace: str,
        name: str,
        compute: Callable[[dict], Awaitable[dict] | dict],
        user: UserInfo,
        *,
        subresource: str = "",
        dry_run: bool = False,
        create_on_missing: bool = False,
        operation: str = "UPDATE",
        on_missing: Callable[[], Awaitable[dict] | dict] | None = None,
        field_manager: str | None = None,
    ) -> tuple[dict, bytes, bool]: ...

    async def delete(
        self, kind: KindInfo, namespace: str, name: str, opts: DeleteOptions, user: UserInfo
    ) -> tuple[dict, bytes, bool]: ...


# --- the verbs ----------------------------------------------------------------------------


@runtime_checkable
class Creater(Protocol):
    async def create(self, ctx: RequestContext, obj: dict) -> tuple[int, dict]:
        """Act on the decoded body; the status code and the object to answer with."""
        ...


@runtime_checkable
class Getter(Protocol):
    async def get(self, ctx: RequestContext) -> dict: ...


@runtime_checkable
class Lister(Protocol):
    async def list(self, ctx: RequestContext) -> dict: ...


@runtime_checkable
class Updater(Protocol):
    async def update(self, ctx: RequestContext, obj: dict) -> tuple[int, dict]: ...


@runtime_checkable
class Patcher(Protocol):
    # The patch media types served, and the schema a strategic merge patch merges by.
    patch_types: tuple[str, ...]
    patch_kind: tuple[str, str, str]  # (group, version, kind) of the patched representation

    async def patch(self, ctx: RequestContext, apply: Callable[[dict], Any]) -> tuple[int, dict]:
        """``apply`` turns the current representation into the patched one (the HTTP
        layer's patch of the request body); it may run more than once (conflict retries)."""
        ...


@runtime_checkable
class Connecter(Protocol):
    async def connect(self, ctx: RequestContext, request: Any) -> Any:
        """Serve the raw HTTP request (the answer is streamed by the object itself)."""
        ...


class StoreSubresource:
    """``status`` and ``approval``: the object itself,
    read and written by the generic store's get, update and patch with the
    sub-resource named, so that the strategy keeps what that write may not change."""


class BodyIgnored:
    """Mixin: a create whose body carries nothing the REST object reads (the HTTP
    layer reads and drops it; SelfSubjectReview)."""

    decodes_body = False


def decodes_body(rest: object) -> bool:
    return getattr(rest, "decodes_body", True)


def validates_body_fields(rest: object) -> bool:
    """Whether the HTTP layer checks the body against its kind's schema (field
    validation); False where the REST object checks and defaults it itself."""
    return getattr(rest, "validates_body_fields", True)


# An implementation named by a declaration: built once per kind that declares it.
RestFactory = Callable[[KindInfo, Subresource | None], Any]


class RestTable:
    """The REST objects of the served kinds: sub-resources by (group, resource,
    sub-resource), from the kinds' declarations; collections whose REST object
    replaces the generic store (the create-only reviews) by (group, resource); and
    paths an alias group serves without a registered kind, by (group, version, resource)."""

    def __init__(self) -> None:
        self.subresources: dict[tuple[str, str, str], Any] = {}
        self.collections: dict[tuple[str, str], Any] = {}
        self.versioned_collections: dict[tuple[str, str, str], Any] = {}
        self.unregistered: dict[tuple[str, str, str], Any] = {}

    @classmethod
    def from_declarations(cls, registry: Registry, implementations: Mapping[str, RestFactory]) -> "RestTable":
        """Every declared sub-resource bound to the implementation it names; a name
        without an implementation is a programming error, reported at start-up."""
        table = cls()
        for kind in registry.kinds:
            for sub in kind.subresources:
                factory = implementations.get(sub.rest)
                if factory is None:
                    raise LookupError(
                        f"{kind.qualified_resource}/{sub.name} names the REST implementation {sub.rest!r}, "
                        "which nobody provides"
                    )
                table.subresources[(kind.group, kind.resource, sub.name)] = factory(kind, sub)
        return table

    def add_collection(self, group: str, resource: str, rest: Any, version: str = "") -> None:
        """``version``: only that version's collection (a version served by conversion)."""
        if version:
            self.versioned_collections[(group, version, resource)] = rest
        else:
            self.collections[(group, resource)] = rest

    def add_unregistered(self, group: str, version: str, resource: str, rest: Any) -> None:
        self.unregistered[(group, version, resource)] = rest

    def subresource(self, kind: KindInfo, name: str) -> Any:
        return self.subresources.get((kind.group, kind.resource, name))

    def collection(self, kind: KindInfo) -> Any:
        found = self.versioned_collections.get((kind.group, kind.version, kind.resource))
        return found if found is not None else self.collections.get((kind.group, kind.resource))
