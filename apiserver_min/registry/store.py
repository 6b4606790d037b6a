"""The generic store: the API's object semantics on top of a storage backend.

Everything kind-independent about reading and writing objects lives here:
storage keys, system metadata, optimistic concurrency, no-op detection,
finalizers and graceful deletion, dry-run, the resource-version rules of get
and list, and consistent paging. HTTP handlers and the in-process controllers
both go through it.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import datetime as _dt
import logging
import time
from typing import Awaitable, Callable

import orjson

from ..admission.chain import Attributes, Chain
from ..api import names
from ..api import status as st
from ..api.codec import decode_stored, encode_for_storage, splice_rv
from ..api.defaults import apply_defaults
from ..api.helpers import json_copy
from ..api.kinds import KindInfo, Registry
from ..api.selectors import FieldSelector, LabelSelector
from ..api.timeutil import format_rfc3339, now
from ..api.user import UserInfo
from ..api.validation import causes
from ..storage.cacher import Entry, WatchCache
from ..storage.interface import (
    Backend,
    CompactedError,
    ConflictError,
    FutureRevisionError,
    KeyExistsError,
    KeyNotFoundError,
    KeyValue,
    TransformError,
    UnavailableError,
)
from ..storage.keys import key_prefix, object_key, scope_prefix
from .families import strategy_for
from .managedfields import record_update
from .rest import DeleteOptions
from .strategy import Strategy, generate_suffix

log = logging.getLogger("orch-apiserver.store")

# Writes without a precondition retry their compare-and-swap until they land, as
# upstream does; only a pathological stream of competing writers runs out this clock.
UPDATE_RETRY_SECONDS = 30.0
# After accepting a namespace's deletion, admission reads that namespace from storage
# (not the cache, which may still show it active) for this long.
NAMESPACE_LIVE_LOOKUP_SECONDS = 30.0
TOO_OLD_CONTINUE = (
    "The provided continue parameter is too old to display a consistent list result. You can start a "
    "new list without the continue parameter, or use the continue token in this response to retrieve "
    "the remainder of the results. Continuing with the provided token results in an inconsistent list "
    "- objects that were created, modified, or deleted between the time the first chunk was returned "
    "and now may show up in the list."
)


@dataclasses.dataclass
class ListResult:
    items: list[tuple[bytes, int]]  # stored bytes and revision, in key order
    resource_version: int
    continue_token: str
    remaining: int | None


def parse_rv(value: str | None, what: str = "resourceVersion") -> int | None:
    """None for unset; the integer otherwise (400 for anything not a version)."""
    if value is None or value == "":
        return None
    try:
        n = int(value)
    except ValueError:
        raise st.bad_request(f"invalid {what} {value!r}: must be a resource version") from None
    if n < 0:
        raise st.bad_request(f"invalid {what} {value!r}: must not be negative")
    return n


def encode_continue(rv: int, start: str) -> str:
    token = orjson.dumps({"v": f"{names.META_GROUP}/v1", "rv": rv, "start": start + "\x00"})
    return base64.urlsafe_b64encode(token).decode().rstrip("=")


def decode_continue(token: str) -> tuple[int, str]:
    try:
        pad = "=" * (-len(token) % 4)
        data = orjson.loads(base64.urlsafe_b64decode(token + pad))
        if not isinstance(data, dict) or data.get("v") != f"{names.META_GROUP}/v1":
            raise ValueError("unknown token version")
        rv, start = data["rv"], data["start"]
        if not isinstance(rv, int) or rv <= 0 or not isinstance(start, str) or not start.endswith("\x00"):
            raise ValueError("malformed token")
        start = start[:-1]
        if start.startswith("/") or "/../" in f"/{start}/" or "\x00" in start:
            raise ValueError("malformed start key")
        return rv, start
    except (ValueError, KeyError, TypeError, binascii.Error, orjson.JSONDecodeError) as exc:
        raise st.bad_request(f"continue key is not valid: {exc}") from None


def _ts_plus(seconds: int) -> str:
    return format_rfc3339(now() + _dt.timedelta(seconds=seconds))


class Store:
    def __init__(self, backend: Backend, registry: Registry, cache: WatchCache, admission: Chain | None = None):
        self.backend = backend
        self.registry = registry
        self.cache = cache
        self.admission = admission or Chain([])
        self.strategies: dict[str, Strategy] = {key_prefix(k): strategy_for(k) for k in registry.kinds}
        self._recent_namespace_deletes: dict[str, float] = {}

    def strategy(self, kind: KindInfo) -> Strategy:
        return self.strategies[key_prefix(kind)]

    def set_strategy(self, kind: KindInfo, strategy: Strategy) -> None:
        """The strategy of a kind defined at run time (or one the server supplies)."""
        self.strategies[key_prefix(kind)] = strategy

    def remove_strategy(self, kind: KindInfo) -> None:
        self.strategies.pop(key_prefix(kind), None)

    # --- reads ------------------------------------------------------------------------
    async def _read(self, key: str) -> KeyValue | None:
        try:
            return await self.backend.get(key)
        except TransformError as exc:
            raise st.internal(str(exc)) from None
        except UnavailableError as exc:
            raise st.service_unavailable(f"storage is unavailable: {exc}", retry_after=1) from None

    async def get(self, kind: KindInfo, namespace: str, name: str, rv: str | None = None) -> tuple[bytes, int]:
        """Stored bytes and revision of one object, by the get table's rules."""
        key = object_key(kind, namespace, name)
        n = parse_rv(rv)
        if n is None:
            kv = await self._read(key)
            if kv is None:
                raise st.not_found(kind.resource, name, kind.group)
            return kv.value, kv.mod_revision
        if n > 0 and not await self.cache.wait_for(n, 3.0):
            raise st.too_large_resource_version(n, self.cache.rv)
        cache = self.cache.cache(key_prefix(kind))
        entry = cache.items.get(key)
        if entry is None:
            if key in cache.undecryptable:
                raise st.internal(cache.undecryptable[key])
            raise st.not_found(kind.resource, name, kind.group)
        return entry.raw, entry.rv

    async def get_object(self, kind: KindInfo, namespace: str, name: str) -> dict:
        raw, rev = await self.get(kind, namespace, name)
        return decode_stored(raw, rev)

    async def namespace_state(self, name: str) -> str | None:
        """The phase of a namespace (None when missing).

        The cache answers when it can. It may lag by an event, so a namespace the
        cache does not know, or whose deletion this server accepted a moment ago,
        is read from storage: a create right after an acknowledged namespace
        deletion must see it terminating."""
        ns_kind = self.registry.by_resource("", "v1", "namespaces")
        assert ns_kind is not None
        key = object_key(ns_kind, "", name)
        entry = self.cache.cache(key_prefix(ns_kind)).items.get(key)
        deleted_at = self._recent_namespace_deletes.get(name)
        if deleted_at is not None and time.monotonic() - deleted_at > NAMESPACE_LIVE_LOOKUP_SECONDS:
            del self._recent_namespace_deletes[name]
            deleted_at = None
        if entry is not None and deleted_at is None:
            return "Terminating" if entry.deleting else "Active"
        kv = await self._read(key)
        if kv is None:
            return None
        obj = decode_stored(kv.value, kv.mod_revision)
        if (obj.get("metadata") or {}).get("deletionTimestamp"):
            return "Terminating"
        return (obj.get("status") or {}).get("phase") or "Active"

    async def list(
        self,
        kind: KindInfo,
        namespace: str | None,
        labels: LabelSelector | None,
        fields: FieldSelector | None,
        rv: str | None,
        rv_match: str | None,
        limit: int,
        cont: str | None,
    ) -> ListResult:
        if rv_match not in (None, "", "Exact", "NotOlderThan"):
            raise st.bad_request(f"invalid resourceVersionMatch {rv_match!r}: must be Exact or NotOlderThan")
        n = parse_rv(rv)
        if rv_match and n is None:
            raise st.bad_request("resourceVersionMatch is forbidden unless resourceVersion is provided")
        if rv_match == "Exact" and n == 0:
            raise st.bad_request('resourceVersionMatch "Exact" is forbidden for resourceVersion "0"')
        if cont:
            if n not in (None, 0):
                raise st.bad_request("specifying resource version is not allowed when using continue")
            if rv_match:
                raise st.bad_request("resourceVersionMatch is forbidden when continue is provided")
            token_rv, start = decode_continue(cont)
            return await self._list_storage(kind, namespace, labels, fields, token_rv, start, limit)
        if n and (rv_match == "Exact" or (not rv_match and limit > 0)):  # exactly that version
            return await self._list_storage(kind, namespace, labels, fields, n, "", limit)
        # Served from the cache: most recent (after a sync), any (0), or not older than n.
        if n is None:
            synced = await self.cache.sync()
            if synced is None:
                current = await self.backend.current_revision()
                return await self._list_storage(kind, namespace, labels, fields, current, "", limit)
        elif n > 0 and not await self.cache.wait_for(n, 3.0):
            raise st.too_large_resource_version(n, self.cache.rv)
        return self._list_cache(kind, namespace, labels, fields, limit if n != 0 else 0)

    @staticmethod
    def _match(e: Entry, labels: LabelSelector | None, fields: FieldSelector | None) -> bool:
        return (labels is None or labels.matches(e.labels)) and (fields is None or fields.matches(e.fields))

    def _list_cache(
        self,
        kind: KindInfo,
        namespace: str | None,
        labels: LabelSelector | None,
        fields: FieldSelector | None,
        limit: int,
    ) -> ListResult:
        cache = self.cache.cache(key_prefix(kind))
        broken = cache.undecryptable_in(namespace if kind.namespaced else None)
        if broken is not None:
            raise st.internal(broken)  # as upstream, a list fails on an object it cannot decrypt
        rv = self.cache.rv
        entries = cache.sorted_entries(namespace if kind.namespaced else None)
        filtered = labels is not None or fields is not None
        if not filtered and not limit:
            return ListResult([(e.raw, e.rv) for e in entries], rv, "", None)
        out: list[Entry] = []
        more = False
        remaining_total = 0
        for i, e in enumerate(entries):
            if not filtered or self._match(e, labels, fields):
                if limit and len(out) >= limit:
                    more = True
                    if filtered:
                        break
                    remaining_total = len(entries) - i
                    break
                out.append(e)
        token = ""
        remaining: int | None = None
        if more:
            token = encode_continue(rv, out[-1].key[len(key_prefix(kind)) :])
            remaining = None if filtered else remaining_total
        return ListResult([(e.raw, e.rv) for e in out], rv, token, remaining)

    async def _list_storage(
        self,
        kind: KindInfo,
        namespace: str | None,
        labels: LabelSelector | None,
        fields: FieldSelector | None,
        revision: int,
        start: str,
        limit: int,
    ) -> ListResult:
        base = key_prefix(kind)
        prefix = scope_prefix(kind, namespace)
        start_key = base + start if start else ""
        if start_key and not start_key.startswith(prefix):
            raise st.bad_request("continue key is not valid: it does not belong to this list")
        cache = self.cache.cache(base)
        filtered = labels is not None or fields is not None
        out: list[tuple[bytes, int, str]] = []
        more = False
        remaining: int | None = None
        try:
            while True:
                # One item beyond the limit tells whether another page exists.
                want = (limit - len(out) + 1) if limit else 0
                page = max(want, 256) if (filtered and limit) else want
                res = await self.backend.list(prefix, revision=revision, start_after=start_key, limit=page)
                for i, kv in enumerate(res.items):
                    if filtered:
                        try:
                            e = cache.make_entry(kv.key, kv.value, kv.mod_revision)
                        except orjson.JSONDecodeError:
                            continue
                        if not self._match(e, labels, fields):
                            continue
                    if limit and len(out) >= limit:
                        more = True
                        if not filtered:
                            remaining = len(res.items) - i + res.remaining
                        break
                    out.append((kv.value, kv.mod_revision, kv.key))
                if more or not res.more or not res.items:
                    break
                start_key = res.items[-1].key
        except CompactedError:
            raise st.gone(
                TOO_OLD_CONTINUE if start else f"The resourceVersion for the provided list is too old: {revision}"
            ) from None
        except FutureRevisionError as exc:
            raise st.too_large_resource_version(revision, exc.current) from None
        except TransformError as exc:
            raise st.internal(str(exc)) from None
        except UnavailableError as exc:
            raise st.service_unavailable(f"storage is unavailable: {exc}", retry_after=1) from None
        token = encode_continue(revision, out[-1][2][len(base) :]) if more and out else ""
        return ListResult([(raw, rev) for raw, rev, _ in out], revision, token, remaining if more else None)

    # --- writes -----------------------------------------------------------------------
    async def create(
        self,
        kind: KindInfo,
        namespace: str,
        obj: dict,
        user: UserInfo,
        *,
        dry_run: bool = False,
        subresource: str = "",
        field_manager: str | None = None,
    ) -> tuple[dict, bytes]:
        """Create one object. With ``field_manager`` the write is recorded in
        managedFields as that manager's Update (server-side apply passes None: its
        merge has recorded the Apply already)."""
        strategy = self.strategy(kind)
        md = obj.setdefault("metadata", {})
        if not isinstance(md, dict):
            raise st.bad_request("metadata must be an object")
        obj["apiVersion"], obj["kind"] = kind.api_version, kind.kind
        if kind.namespaced:
            md["namespace"] = namespace
        if not md.get("name") and md.get("generateName"):
            gen = md["generateName"]
            if not isinstance(gen, str):
                raise st.invalid(
                    kind.kind,
                    "",
                    [
                        {
                            "reason": "FieldValueTypeInvalid",
                            "field": "metadata.generateName",
                            "message": "must be a string",
                        }
                    ],
                    kind.group,
                )
            md["name"] = gen + generate_suffix()
        if md.get("resourceVersion"):
            raise st.bad_request("resourceVersion should not be set on objects to be created")
        strategy.prepare_for_create(obj)
        apply_defaults(kind.group, kind.version, kind.kind, obj)
        if field_manager is not None:
            # Before mutating admission, as upstream: what plugins add is not the writer's.
            record_update(kind, None, obj, field_manager)
        strategy.prepare_for_request(obj, None, user, subresource)
        # Upstream's order: mutating admission, then the strategy's preparation, defaults
        # and validation, then validating admission. So what a mutating plugin adds is
        # prepared, defaulted and validated like the client's own fields: the object is
        # prepared and defaulted again once mutating plugins ran.
        name = md.get("name")
        attrs = Attributes(
            "CREATE", kind, namespace, name if isinstance(name, str) else "", subresource, obj, None, user, dry_run
        )
        if field_manager is not None:
            attrs.options["fieldManager"] = field_manager
        if await self.admission.admit(attrs):
            self._prepare_create_again(kind, strategy, obj, user, subresource)
            md = obj["metadata"]
        # What the object takes from outside itself (a Service's addresses and ports) is
        # given back unless the write lands.
        txn = await strategy.begin_create(obj, dry_run) if not subresource else None
        try:
            errs = strategy.validate(obj)
            if errs:
                raise st.invalid(
                    kind.kind, str(md.get("name") or md.get("generateName") or ""), causes(errs), kind.group
                )
            await self.admission.validate(attrs)
            await strategy.to_storage(obj)
            raw = encode_for_storage(obj)
            key = object_key(kind, namespace, md["name"])
            if dry_run:
                if await self._read(key) is not None:
                    raise st.already_exists(kind.resource, md["name"], kind.group)
                rev = 0
            else:
                try:
                    rev = await self.backend.create(key, raw)
                except KeyExistsError:
                    raise st.already_exists(kind.resource, md["name"], kind.group) from None
                except UnavailableError as exc:
                    raise st.service_unavailable(f"storage is unavailable: {exc}", retry_after=1) from None
        except BaseException:
            if txn is not None:
                await txn.revert()
            raise
        if txn is not None:
            await txn.commit()
        if dry_run:
            return obj, raw
        self.cache.note_write(key, rev, obj)
        md["resourceVersion"] = str(rev)
        return obj, splice_rv(raw, rev)

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
    ) -> tuple[dict, bytes, bool]:
        """Read, compute the new object from the old, validate and compare-and-swap.

        With ``field_manager`` the write is recorded in managedFields as that
        manager's Update, after defaulting (so the writer owns the defaults it
        caused, as upstream); server-side apply passes None and records itself.

        ``compute`` gets a fresh copy of the current object on each attempt. A
        ``resourceVersion`` in the computed object is a precondition: if it differs
        from the stored one the update fails with 409 instead of being retried.
        Returns (object, response bytes, created)."""
        strategy = self.strategy(kind)
        key = object_key(kind, namespace, name)
        deadline = time.monotonic() + UPDATE_RETRY_SECONDS
        while time.monotonic() < deadline:
            kv = await self._read(key)
            if kv is None:
                if create_on_missing and on_missing is not None:
                    new = on_missing()
                    if not isinstance(new, dict):
                        new = await new
                    obj, raw = await self.create(
                        kind, namespace, new, user, dry_run=dry_run, field_manager=field_manager
                    )
                    return obj, raw, True
                raise st.not_found(kind.resource, name, kind.group)
            old = decode_stored(kv.value, kv.mod_revision)
            # A second decode is a cheaper private copy than a deep copy.
            new = compute(decode_stored(kv.value, kv.mod_revision))
            if not isinstance(new, dict):
                new = await new
            if not isinstance(new, dict):
                raise st.bad_request("the request body must be an object")
            nmd = new.get("metadata")
            if not isinstance(nmd, dict):
                raise st.bad_request("metadata must be an object")
            given_rv = nmd.get("resourceVersion")
            if given_rv not in (None, "") and str(given_rv) != str(kv.mod_revision):
                parse_rv(str(given_rv))
                raise st.conflict(kind.resource, name, kind.group)
            if nmd.get("name", name) != name:
                raise st.bad_request(
                    f"the name of the object ({nmd.get('name')}) does not match the name on the URL ({name})"
                )
            if kind.namespaced and nmd.get("namespace", namespace) != namespace:
                raise st.bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
            omd = old["metadata"]
            if nmd.get("uid") not in (None, "", omd.get("uid")):
                raise st.conflict(
                    kind.resource,
                    name,
                    kind.group,
                    f"Precondition failed: UID in precondition: {nmd.get('uid')}, UID in object meta: {omd.get('uid')}",
                )
            new["apiVersion"], new["kind"] = kind.api_version, kind.kind
            self._prepare_update(strategy, subresource, new, old)
            apply_defaults(kind.group, kind.version, kind.kind, new)
            if field_manager is not None:
                record_update(kind, old, new, field_manager, subresource)
            strategy.prepare_for_request(new, old, user, subresource)
            # The strategy's preparation says what this write may change (a status write
            # keeps all but the status), so managedFields are recorded after it; when a
            # mutating plugin handles the update, its result is prepared and defaulted
            # again, as upstream (mutating admission, then PrepareForUpdate) would. Then
            # validation, then validating admission.
            attrs = Attributes(operation, kind, namespace, name, subresource, new, old, user, dry_run)
            if field_manager is not None:
                attrs.options["fieldManager"] = field_manager
            if await self.admission.admit(attrs):
                # managedFields stay as recorded before admission (a status write's
                # preparation copies the old metadata, which would drop this write's entry).
                recorded = (new.get("metadata") or {}).get("managedFields")
                self._prepare_update(strategy, subresource, new, old)
                apply_defaults(kind.group, kind.version, kind.kind, new)
                strategy.prepare_for_request(new, old, user, subresource)
                if recorded is not None:
                    new.setdefault("metadata", {})["managedFields"] = recorded
            txn = await strategy.begin_update(new, old, dry_run) if not subresource else None
            try:
                result = await self._finish_update(kind, strategy, key, name, kv, new, old, attrs, dry_run, given_rv)
            except BaseException:
                if txn is not None:
                    await txn.revert()
                raise
            if result is None:  # lost a compare-and-swap race: compute again
                if txn is not None:
                    await txn.revert()
                continue
            if txn is not None:
                await txn.commit()
            return result
        raise st.conflict(kind.resource, name, kind.group, "too many concurrent writers; try again")

    async def _finish_update(
        self,
        kind: KindInfo,
        strategy: Strategy,
        key: str,
        name: str,
        kv: KeyValue,
        new: dict,
        old: dict,
        attrs: Attributes,
        dry_run: bool,
        given_rv: object,
    ) -> tuple[dict, bytes, bool] | None:
        """Validate and write a computed update; None when the stored object changed
        meanwhile (the caller computes it again)."""
        sub = attrs.subresource
        seen_old = await strategy.old_for_validation(new, old)
        if sub in strategy.own_subresources:
            errs = strategy.validate_subresource_update(sub, new, seen_old)
        elif sub == "status":
            errs = strategy.validate_status_update(new, seen_old)
        else:
            errs = strategy.validate_update(new, seen_old)
        if errs:
            raise st.invalid(kind.kind, name, causes(errs), kind.group)
        await self.admission.validate(attrs)
        await strategy.to_storage(new)
        remove = self._should_delete_on_update(kind, new, old)
        raw = encode_for_storage(new)
        if remove:
            if dry_run:
                return new, raw, False
            try:
                rev, _ = await self.backend.delete(key, kv.mod_revision)
            except ConflictError:
                return None
            except KeyNotFoundError:
                raise st.not_found(kind.resource, name, kind.group) from None
            await strategy.after_delete(new, self)
            new["metadata"]["resourceVersion"] = str(rev)
            return new, splice_rv(raw, rev), False
        if self._same_object(new, old) or dry_run:
            new["metadata"]["resourceVersion"] = str(kv.mod_revision)
            return new, splice_rv(raw, kv.mod_revision), False
        try:
            rev = await self.backend.update(key, raw, kv.mod_revision)
        except ConflictError:
            if given_rv not in (None, ""):
                raise st.conflict(kind.resource, name, kind.group) from None
            return None
        except KeyNotFoundError:
            raise st.not_found(kind.resource, name, kind.group) from None
        except UnavailableError as exc:
            raise st.service_unavailable(f"storage is unavailable: {exc}", retry_after=1) from None
        self.cache.note_write(key, rev, new)
        new["metadata"]["resourceVersion"] = str(rev)
        return new, splice_rv(raw, rev), False

    @staticmethod
    def _prepare_create_again(kind: KindInfo, strategy: Strategy, obj: dict, user: UserInfo, subresource: str) -> None:
        """After mutating plugins ran: prepare and default the object again, as upstream
        (mutating admission before PrepareForCreate; defaults applied to what webhooks
        return) would have, so a plugin's additions get their defaults and derived
        fields (a pod's QoS class) and a status it set is reset. The object keeps the
        identity the first pass gave it; managedFields stay as recorded before."""
        md = obj.get("metadata")
        if not isinstance(md, dict):
            raise st.bad_request("metadata must be an object")
        identity = {f: md[f] for f in ("uid", "creationTimestamp") if f in md}
        strategy.prepare_for_create(obj)
        obj["metadata"].update(identity)
        apply_defaults(kind.group, kind.version, kind.kind, obj)
        strategy.prepare_for_request(obj, None, user, subresource)

    @staticmethod
    def _prepare_update(strategy: Strategy, subresource: str, new: dict, old: dict) -> None:
        """The strategy's preparation for this kind of write (idempotent: it runs again
        after mutating admission)."""
        if subresource in ("status", "approval"):
            strategy.prepare_for_status_update(new, old)
        elif subresource in ("finalize", "binding"):
            # Internal writes that set exactly what they computed.
            strategy.keep_system_metadata(new, old)
        elif subresource in strategy.own_subresources:
            strategy.prepare_for_subresource_update(subresource, new, old)
        else:
            strategy.prepare_for_update(new, old)

    @staticmethod
    def _same_object(new: dict, old: dict) -> bool:
        """Equal apart from the resourceVersion, whatever the key order: a no-op write."""
        a, b = dict(new), dict(old)
        a["metadata"] = {k: v for k, v in (new.get("metadata") or {}).items() if k != "resourceVersion"}
        b["metadata"] = {k: v for k, v in (old.get("metadata") or {}).items() if k != "resourceVersion"}
        return a == b

    @staticmethod
    def _pending_finalizers(kind: KindInfo, obj: dict) -> bool:
        if (obj.get("metadata") or {}).get("finalizers"):
            return True
        if kind.group == "" and kind.resource == "namespaces":
            return bool((obj.get("spec") or {}).get("finalizers"))
        return False

    def _should_delete_on_update(self, kind: KindInfo, new: dict, old: dict) -> bool:
        omd = old["metadata"]
        if not omd.get("deletionTimestamp") or self._pending_finalizers(kind, new):
            return False
        grace = omd.get("deletionGracePeriodSeconds")
        return grace is None or grace == 0

    async def delete(
        self, kind: KindInfo, namespace: str, name: str, opts: DeleteOptions, user: UserInfo
    ) -> tuple[dict, bytes, bool]:
        """Delete one object. Returns (last object, response bytes, deleted_now)."""
        key = object_key(kind, namespace, name)
        if kind.group == "" and kind.resource == "namespaces" and not opts.dry_run:
            self._recent_namespace_deletes[name] = time.monotonic()
        deadline = time.monotonic() + UPDATE_RETRY_SECONDS
        while time.monotonic() < deadline:
            kv = await self._read(key)
            if kv is None:
                raise st.not_found(kind.resource, name, kind.group)
            obj = decode_stored(kv.value, kv.mod_revision)
            md = obj["metadata"]
            if opts.preconditions_uid and opts.preconditions_uid != md.get("uid"):
                raise st.conflict(
                    kind.resource,
                    name,
                    kind.group,
                    f"Precondition failed: UID in precondition: {opts.preconditions_uid}, "
                    f"UID in object meta: {md.get('uid')}",
                )
            if opts.preconditions_rv and opts.preconditions_rv != str(kv.mod_revision):
                raise st.conflict(
                    kind.resource,
                    name,
                    kind.group,
                    f"Precondition failed: ResourceVersion in precondition: {opts.preconditions_rv}, "
                    f"ResourceVersion in meta: {kv.mod_revision}",
                )
            await self.admission.run(
                Attributes(
                    "DELETE",
                    kind,
                    namespace,
                    name,
                    "",
                    None,
                    obj,
                    user,
                    opts.dry_run,
                    {"gracePeriodSeconds": opts.grace_period_seconds},
                )
            )
            new = json_copy(obj)
            nmd = new["metadata"]
            grace = self._grace_period(kind, obj, opts)
            policy = opts.propagation_policy or self.strategy(kind).default_propagation
            fins = list(nmd.get("finalizers") or [])
            if policy == "Orphan" and names.FINALIZER_ORPHAN not in fins:
                fins.append(names.FINALIZER_ORPHAN)
            elif policy == "Foreground" and names.FINALIZER_FOREGROUND not in fins:
                fins.append(names.FINALIZER_FOREGROUND)
            if fins != list(nmd.get("finalizers") or []):
                if nmd.get("deletionTimestamp") and policy in ("Orphan", "Foreground"):
                    pass  # already terminating: the propagation choice was made by the first delete
                else:
                    nmd["finalizers"] = fins
            if nmd.get("deletionTimestamp"):
                # Already terminating: only a shorter grace period changes anything.
                current = nmd.get("deletionGracePeriodSeconds")
                if grace is not None and current is not None and grace < current:
                    nmd["deletionGracePeriodSeconds"] = grace
                    nmd["deletionTimestamp"] = _ts_plus(grace)
                if not self._pending_finalizers(kind, new) and (nmd.get("deletionGracePeriodSeconds") or 0) == 0:
                    res = await self._remove(kind, key, new, kv, opts, name)
                elif new == obj:
                    return obj, splice_rv(encode_for_storage(obj), kv.mod_revision), False
                else:
                    res = await self._write_terminating(kind, key, new, kv, opts, name)
                if res is None:
                    continue
                return res
            graceful = grace is not None and grace > 0
            if graceful or self._pending_finalizers(kind, new):
                nmd["deletionTimestamp"] = _ts_plus(grace or 0)
                nmd["deletionGracePeriodSeconds"] = grace or 0
                if kind.group == "" and kind.resource == "namespaces":
                    new.setdefault("status", {})["phase"] = "Terminating"
                res = await self._write_terminating(kind, key, new, kv, opts, name)
                if res is None:
                    continue
                return res
            res = await self._remove(kind, key, obj, kv, opts, name)
            if res is None:
                continue
            return res
        raise st.conflict(kind.resource, name, kind.group, "too many concurrent writers; try again")

    def _grace_period(self, kind: KindInfo, obj: dict, opts: DeleteOptions) -> int | None:
        """Only pods delete gracefully; the rest go at once (or wait for finalizers)."""
        if not (kind.group == "" and kind.resource == "pods"):
            return None
        spec, status = obj.get("spec") or {}, obj.get("status") or {}
        if not spec.get("nodeName") or status.get("phase") in ("Succeeded", "Failed"):
            return 0
        if opts.grace_period_seconds is not None:
            return max(0, opts.grace_period_seconds)
        tgps = spec.get("terminationGracePeriodSeconds")
        return 30 if tgps is None else max(0, int(tgps))

    async def _write_terminating(self, kind, key, new, kv, opts, name):
        raw = encode_for_storage(new)
        if opts.dry_run:
            return new, splice_rv(raw, kv.mod_revision), False
        try:
            rev = await self.backend.update(key, raw, kv.mod_revision)
        except ConflictError:
            return None
        except KeyNotFoundError:
            raise st.not_found(kind.resource, name, kind.group) from None
        new["metadata"]["resourceVersion"] = str(rev)
        return new, splice_rv(raw, rev), False

    async def _remove(self, kind, key, obj, kv, opts, name):
        raw = encode_for_storage(obj)
        if opts.dry_run:
            return obj, splice_rv(raw, kv.mod_revision), True
        try:
            await self.backend.delete(key, kv.mod_revision)
        except ConflictError:
            return None
        except KeyNotFoundError:
            raise st.not_found(kind.resource, name, kind.group) from None
        await self.strategy(kind).after_delete(obj, self)
        return obj, splice_rv(raw, kv.mod_revision), True
