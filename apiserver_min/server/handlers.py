"""HTTP handlers for resource requests: every verb on every registered kind."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
import time
from typing import TYPE_CHECKING, Any

from aiohttp import web

from ..api import codec, names, protobuf
from ..api import status as st
from ..api.kinds import KindInfo, Subresource
from ..api.schemas import schema_for
from ..api.selectors import FieldSelector, LabelSelector, SelectorError, parse_field_selector, parse_label_selector
from ..api.user import UserInfo
from ..api.validation import FieldError, go_quote
from ..api.validation import causes as strategy_causes
from ..registry import fieldvalidation
from ..registry.managedfields import FIELD_MANAGER_MAX_LENGTH, apply_request, manager_from_user_agent
from ..registry.patching import apply_patch, patch_object
from ..registry.rest import (
    Connecter,
    Creater,
    Getter,
    Lister,
    Patcher,
    RequestContext,
    RestTable,
    StoreSubresource,
    Updater,
    decodes_body,
    validates_body_fields,
)
from ..registry.store import DeleteOptions, parse_rv
from ..storage.cacher import CacheEvent, Watcher, WatcherClosed, chunked_transport_sink
from ..storage.interface import CompactedError
from ..storage.keys import key_prefix
from . import auditing, listbody
from .auditing import REQUEST_BODY_KEY, REQUEST_OBJECT_KEY, RESPONSE_OBJECT_KEY
from .negotiation import JSON, Target, negotiate, protobuf_body, table, validate_include_object
from .reviews import review_protobuf_decoders
from .routing import GROUP_ALIAS_KEY, GroupAlias, RequestInfo, StorageVersionAlias, require_kind
from .tokenrequest import decode_token_request

if TYPE_CHECKING:
    from .context import ServerContext

log = logging.getLogger("orch-apiserver.handlers")

BODY_TYPES_JSON = ("application/json", "")
BODY_TYPES_YAML = ("application/yaml", "application/x-yaml", "text/yaml")
PROTOBUF_TYPES = (names.MEDIA_PROTOBUF, names.MEDIA_PROTOBUF_UPSTREAM)
FIELD_WARNINGS_KEY = "orch.field_warnings"  # request key: field-validation warnings for the response
# Request key: the alias group the body's apiVersion named where the path named none
# (a TokenRequest in the upstream spelling); the reply answers in that spelling.
BODY_ALIAS_KEY = "orch.body_group_alias"
# Kinds whose protobuf bodies have their own decoder (the generic one reads only the
# orch spelling of the envelope's apiVersion; kubectl sends these in upstream's).
PROTOBUF_DECODERS = {**review_protobuf_decoders(), "TokenRequest": decode_token_request}
WATCH_LIVENESS_CHECK = 5.0  # seconds between checks that an idle watch's client is still there


def _content_type(request: web.Request) -> str:
    return (request.headers.get("Content-Type") or "").split(";")[0].strip().lower()


def _header_safe(text: str) -> str:
    """TEXT with control characters escaped (``\\x01``, ``\\u2028``). Field names in
    warnings are already Go-quoted (``fieldvalidation.unknown_field``), so this only
    guards against a raw CR, LF or NUL reaching a header some other way (aiohttp
    refuses to send the response at all)."""
    if text.isprintable():
        return text
    return "".join(
        c
        if c.isprintable() or c == " "
        else (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}" if ord(c) < 0x10000 else f"\\U{ord(c):08x}")
        for c in text
    )


def _bool_param(query, name: str) -> bool:
    v = query.get(name)
    if v is None:
        return False
    v = v.lower()
    if v in ("", "1", "true"):
        return True
    if v in ("0", "false"):
        return False
    raise st.bad_request(f"invalid {name} {query.get(name)!r}: must be true or false")


def _int_param(query, name: str, default: int = 0) -> int:
    v = query.get(name)
    if v is None or v == "":
        return default
    try:
        n = int(v)
    except ValueError:
        raise st.bad_request(f"invalid {name} {v!r}: must be an integer") from None
    return n


# The values upstream's ValidateDryRun and ValidateFieldValidation accept (sorted, as
# their "supported values" lists them); an empty fieldValidation is the default, Warn.
DRY_RUN_VALUES = ("All",)
FIELD_VALIDATION_VALUES = ("", "Ignore", "Strict", "Warn")


@dataclasses.dataclass(frozen=True)
class _DryRunNotSupported(FieldError):
    """ValidateDryRun's error: its bad value is the whole ``[]string`` (``value``: a
    tuple), which upstream's ``field.Error`` prints as Go's ``%#v`` does
    (``[]string{"x", ""}``)."""

    def body(self) -> str:
        shown = "[]string{" + ", ".join(go_quote(v) for v in self.value) + "}"
        return f"Unsupported value: {shown}: {self.detail}"


def _dry_run_errors(query) -> list[FieldError]:
    """Upstream's ValidateDryRun: every ``dryRun`` value (an empty one too) must be
    ``All``; one Unsupported value naming them all."""
    values = query.getall("dryRun", [])
    if all(v in DRY_RUN_VALUES for v in values):
        return []
    return [_DryRunNotSupported.not_supported("dryRun", tuple(values), DRY_RUN_VALUES)]


def _field_validation_errors(query) -> list[FieldError]:
    """Upstream's ValidateFieldValidation: ``fieldValidation`` (its first value, as
    the query decoding reads it) is empty, Ignore, Warn or Strict."""
    v = query.get("fieldValidation", "")
    if v in FIELD_VALIDATION_VALUES:
        return []
    return [FieldError.not_supported("fieldValidation", v, FIELD_VALIDATION_VALUES)]


def _dry_run(query, options_kind: str) -> bool:
    """Whether ``dryRun=All`` was asked for; any other value is upstream's 422
    Invalid naming ``options_kind`` (CreateOptions, UpdateOptions, PatchOptions or
    DeleteOptions)."""
    if "dryRun" not in query:
        return False
    errs = _dry_run_errors(query)
    if errs:
        raise st.invalid(options_kind, "", strategy_causes(errs), names.META_GROUP)
    return True


def _field_validation(query, options_kind: str = "CreateOptions") -> str:
    """The field-validation level (Warn when unset); an unknown one is upstream's
    422 Invalid naming ``options_kind``. Writes check it with their other options
    first (:func:`_write_options`); the default kind is for creates that only
    decode a body (reviews, bindings, evictions)."""
    v = query.get("fieldValidation", "")
    if v in ("Ignore", "Strict", "Warn"):
        return v
    errs = _field_validation_errors(query)
    if errs:
        raise st.invalid(options_kind, "", strategy_causes(errs), names.META_GROUP)
    return "Warn"


def _field_manager_errors(fm: str) -> list[FieldError]:
    """Upstream's ValidateFieldManager: at most 128 bytes, printable characters only
    (each other one named with its byte position, as Go's ``%#U`` names it)."""
    errs: list[FieldError] = []
    if len(fm.encode("utf-8", "surrogatepass")) > FIELD_MANAGER_MAX_LENGTH:
        errs.append(FieldError.too_long("fieldManager", fm, FIELD_MANAGER_MAX_LENGTH))
    if not fm.isprintable():
        pos = 0
        for ch in fm:
            if not ch.isprintable():
                errs.append(
                    FieldError.invalid("fieldManager", fm, f"invalid character U+{ord(ch):04X} (at position {pos})")
                )
            pos += len(ch.encode("utf-8", "surrogatepass"))
    return errs


def _force_param(query) -> bool:
    """``force`` as upstream's query decoding reads a boolean: absent, ``0`` or
    ``false`` (any case) is false, anything else (even empty) true."""
    values = query.getall("force", [])
    return bool(values) and values[0] != "0" and values[0].lower() != "false"


def _write_options(request: web.Request, options_kind: str, patch_type: str | None) -> tuple[str, bool]:
    """The field manager and ``force`` of a write, checked as upstream's
    Validate{Create,Update,Patch}Options check them: ``force`` only with an apply
    patch, a ``fieldManager`` required for one, and at most 128 printable bytes.
    422 Invalid naming the options kind (``PatchOptions.meta...``) and every problem.
    An omitted manager is the user agent's product name (upstream managerOrUserAgent)."""
    q = request.query
    fm = q.get("fieldManager", "")
    errs: list[FieldError] = []
    force = False
    if options_kind == "PatchOptions":
        if patch_type != names.MEDIA_APPLY_PATCH:
            if "force" in q:
                errs.append(FieldError.forbidden("force", "may not be specified for non-apply patch"))
        else:
            if not fm:
                errs.append(FieldError.required("fieldManager", "is required for apply patch"))
            force = _force_param(q)
    if fm:
        errs += _field_manager_errors(fm)
    errs += _dry_run_errors(q) + _field_validation_errors(q)
    if errs:
        raise st.invalid(options_kind, "", strategy_causes(errs), names.META_GROUP)
    if not fm:
        fm = manager_from_user_agent(request.headers.get("User-Agent", "")) or "unknown"
    return fm, force


def _body_alias(api_version: str, want_api_version: str) -> GroupAlias | None:
    """The alias when ``api_version`` is an upstream spelling of ``want_api_version``'s group."""
    group, _, version = api_version.rpartition("/")
    served = names.GROUP_ALIASES.get(group)
    if served is None or f"{served}/{version}" != want_api_version:
        return None
    return GroupAlias(group, served, version)


def request_selectors(kind: KindInfo, query, alias: Any = None) -> tuple[LabelSelector | None, FieldSelector | None]:
    """The request's label and field selectors; on an alias group's path, label keys in
    the upstream spelling (``names.LABEL_ALIASES``) select by ours."""
    ls = fs = None
    try:
        raw = query.get("labelSelector", "")
        if raw:
            ls = parse_label_selector(raw)
            if ls.empty:
                ls = None
            elif alias is not None and any(r.key in names.LABEL_ALIASES for r in ls.requirements):
                ls = LabelSelector(r._replace(key=names.LABEL_ALIASES.get(r.key, r.key)) for r in ls.requirements)
        raw = query.get("fieldSelector", "")
        if raw:
            fs = parse_field_selector(raw)
            fs.validate_fields(kind.field_names)
            if fs.empty:
                fs = None
    except SelectorError as exc:
        raise st.bad_request(
            f"unable to parse requirement: {exc}" if "requirement" not in str(exc) else str(exc)
        ) from None
    except ValueError as exc:
        raise st.bad_request(str(exc)) from None
    return ls, fs


@dataclasses.dataclass(frozen=True)
class WriteParams:
    """The query parameters every write shares, parsed and checked once."""

    target: Target
    dry_run: bool
    field_validation: str
    field_manager: str
    force: bool = False

    @classmethod
    def parse(
        cls, request: web.Request, options_kind: str = "CreateOptions", patch_type: str | None = None
    ) -> "WriteParams":
        """``options_kind``: CreateOptions, UpdateOptions or PatchOptions (with the
        patch's content type), which upstream names in its 422 for bad options."""
        q = request.query
        manager, force = _write_options(request, options_kind, patch_type)
        return cls(
            negotiate(request.headers.get("Accept")),
            _dry_run(q, options_kind),
            _field_validation(q, options_kind),
            manager,
            force,
        )


class ResourceHandlers:
    def __init__(self, server: "ServerContext"):
        self.server = server
        self.store = server.store
        self.cache = server.cache
        # Large bodies (lists built here, any body sent in slices) take turns on the loop.
        self.turns = listbody.Turns()

    # --- response helpers ------------------------------------------------------------
    async def _respond_raw(
        self,
        request: web.Request,
        raw: bytes,
        code: int,
        target: Target,
        kind: KindInfo | None = None,
        include: str = "Metadata",
    ) -> web.Response:
        if target.form == "json" and not self._pretty(request) and request.get(GROUP_ALIAS_KEY) is None:
            request[RESPONSE_OBJECT_KEY] = raw  # decoded only for an audit event that records it
            return self._with_warnings(request, web.Response(body=raw, status=code, content_type="application/json"))
        obj = codec.load_json(raw)
        return await self._respond_obj(request, obj, code, target, kind, include)

    async def _respond_obj(
        self,
        request: web.Request,
        obj: Any,
        code: int,
        target: Target,
        kind: KindInfo | None = None,
        include: str = "Metadata",
    ) -> web.Response:
        alias = request.get(GROUP_ALIAS_KEY)
        if alias is not None:  # a request on an alias group: answered in the client's spelling
            obj = alias.to_requested(await alias.convert(obj))
        request[RESPONSE_OBJECT_KEY] = obj
        if target.form == "table" and kind is not None and isinstance(obj, dict) and obj.get("kind") == kind.kind:
            obj = table(
                kind, [obj], target, include, resource_version=(obj.get("metadata") or {}).get("resourceVersion", "")
            )
        if target.form == "yaml":
            return self._with_warnings(
                request, web.Response(body=codec.dump_yaml(obj), status=code, content_type="application/yaml")
            )
        if target.form == "protobuf":
            pb_body = protobuf_body(obj)  # None: no protobuf encoding, answer in JSON
            if pb_body is not None:
                return self._with_warnings(
                    request, web.Response(body=pb_body, status=code, content_type=target.content_type)
                )
        body = codec.dumps_pretty(obj) if self._pretty(request) else codec.dumps(obj)
        return self._with_warnings(request, web.Response(body=body, status=code, content_type="application/json"))

    @staticmethod
    def _with_warnings(request: web.Request, resp: web.Response) -> web.Response:
        """Attach the request's field-validation warnings: one ``Warning`` header
        entry each, as upstream sends them (kubectl prints every one)."""
        warnings = request.get(FIELD_WARNINGS_KEY)
        if warnings:
            sent: set[str] = set()
            for text in warnings:
                if text not in sent:  # a repeated warning is sent once, as upstream's recorder does
                    sent.add(text)
                    resp.headers.add("Warning", fieldvalidation.warning_header(_header_safe(text)))
        return resp

    @staticmethod
    def _pretty(request: web.Request) -> bool:
        v = request.query.get("pretty")
        return v is not None and v.lower() in ("", "1", "true")

    async def _read_body(self, request: web.Request) -> bytes:
        limit = self.server.opts.max_request_body_bytes
        if request.content_length is not None and request.content_length > limit:
            raise st.request_entity_too_large(f"the request body is larger than {limit} bytes")
        # One read() returns what has arrived so far; read until the end of the body.
        chunks: list[bytes] = []
        size = 0
        while True:
            chunk = await request.content.read(65536)
            if not chunk:
                break
            size += len(chunk)
            if size > limit:
                raise st.request_entity_too_large(f"the request body is larger than {limit} bytes")
            chunks.append(chunk)
        body = b"".join(chunks)
        request[REQUEST_BODY_KEY] = body  # for the audit event at the Request level
        return body

    @staticmethod
    def _decode_protobuf(body: bytes) -> codec.DecodedBody:
        """A protobuf body (magic + envelope) decoded with the schema of the kind its
        envelope names: 400 for a wrong prefix or a malformed message. Protobuf
        has no duplicate keys, and unknown field numbers are skipped as upstream
        skips them."""

        if not body:
            raise st.bad_request("the request body is empty; an object was expected")
        try:
            obj = protobuf.decode(body)
        except protobuf.ProtobufError as exc:
            raise st.bad_request(f"error decoding protobuf body: {exc}") from None
        return codec.DecodedBody(obj, "protobuf", body, {})

    async def _decode_object(
        self,
        request: web.Request,
        kind: KindInfo,
        expect_kind: str | None = None,
        expect_api_version: str | None = None,
        validate: bool = True,
    ) -> dict:
        """The request body as the object it must be (``expect_kind`` in
        ``expect_api_version``; by default the kind itself), field-validated against
        its schema unless ``validate`` is False."""
        ctype = _content_type(request)
        if ctype in PROTOBUF_TYPES:
            body = await self._read_body(request)
            special = PROTOBUF_DECODERS.get(expect_kind or kind.kind)
            if special is not None:
                decoded = codec.DecodedBody(special(body), "protobuf", body, {})
            else:
                decoded = self._decode_protobuf(body)
        elif ctype not in BODY_TYPES_JSON and ctype not in BODY_TYPES_YAML:
            raise st.unsupported_media_type(
                f"the body of the request was in an unknown format ({ctype}) - accepted media types "
                f"include: application/json, application/yaml, {names.MEDIA_PROTOBUF}"
            )
        else:
            body = await self._read_body(request)
            decoded = codec.decode_object_body(
                body, "application/yaml" if ctype in BODY_TYPES_YAML else "application/json"
            )
        obj = decoded.obj
        if not isinstance(obj, dict):
            raise st.bad_request("the request body must be a JSON or YAML object")
        request[REQUEST_OBJECT_KEY] = obj
        want_kind = expect_kind or kind.kind
        want_av = expect_api_version or kind.api_version
        # On an alias group's path the body may name the group either way (kind's own API only).
        alias = request.get(GROUP_ALIAS_KEY) if expect_api_version is None else None
        got_kind, got_av = obj.get("kind"), obj.get("apiVersion")
        if got_kind not in (None, "") and got_kind != want_kind:
            raise st.bad_request(f"the kind in the data ({got_kind}) does not match the expected kind ({want_kind})")
        if got_av not in (None, "") and got_av != want_av and (alias is None or got_av != alias.requested_api_version):
            # Another kind's body (a sub-resource's) may name its group in an upstream spelling.
            alias = _body_alias(got_av, want_av) if expect_api_version is not None and isinstance(got_av, str) else None
            if alias is None:
                raise st.bad_request(
                    f"the API version in the data ({got_av}) does not match the expected API version ({want_av})"
                )
            request[BODY_ALIAS_KEY] = alias
        md = obj.get("metadata")
        if md is not None and not isinstance(md, dict):
            raise st.bad_request("metadata: must be an object")
        # Field validation may hand back a fresh decode (duplicate keys), so this comes after it.
        if validate:
            obj = self._validate_fields(request, decoded, want_kind, want_av)
        if alias is not None:
            alias.to_served(obj)
        if obj.get("metadata") is None:
            obj.pop("metadata", None)  # null is absent (later steps add an empty one)
        return obj

    def _validate_fields(
        self, request: web.Request, decoded: codec.DecodedBody, kind_name: str, api_version: str
    ) -> dict:
        """Field validation of a decoded body against its kind's schema (types,
        required, unknown and duplicate fields per ``fieldValidation``); the
        warnings go on the response. Kinds without a declared schema pass as they are."""
        group, _, version = api_version.rpartition("/")
        schema = schema_for(group, version, kind_name)
        if schema is None:
            custom = self.server.registry.by_kind(group, version, kind_name)
            if custom is not None and custom.custom and isinstance(decoded.obj, dict):
                level = _field_validation(request.query)
                obj, dups = (decoded.obj, []) if level == "Ignore" else fieldvalidation.decoded_duplicates(decoded)
                self._unknown_custom_fields(request, custom, obj, level, dups)
                return obj  # type: ignore[no-any-return]
            return decoded.obj
        obj, warnings = fieldvalidation.validate_decoded(
            decoded, schema, _field_validation(request.query), kind=kind_name, version=version, group=group
        )
        request[FIELD_WARNINGS_KEY] = warnings
        return obj

    def _validated_patch(
        self, request: web.Request, kind: KindInfo, new: dict, level: str, ctype: str, body: bytes
    ) -> dict:
        """The final step of a patch: the patched object is checked like a submitted
        one (unknown fields dropped or reported, types and required fields
        checked); for merge, strategic merge and apply patches, keys repeated in
        the patch document count as duplicate fields, as upstream reports them. Runs on every retry of the
        update, so the warnings are replaced, not added to."""
        schema = schema_for(kind.group, kind.version, kind.kind)
        if schema is None and not kind.custom:
            return new
        dups: list[str] = []
        if level != "Ignore" and ctype in (
            names.MEDIA_MERGE_PATCH,
            names.MEDIA_STRATEGIC_MERGE_PATCH,
            names.MEDIA_APPLY_PATCH,
        ):
            dups = fieldvalidation.duplicate_fields(body, yaml=ctype == names.MEDIA_APPLY_PATCH)
        if schema is None:
            self._unknown_custom_fields(request, kind, new, level, dups)
            return new
        warnings = fieldvalidation.validate_object(
            new, schema, level, kind=kind.kind, version=kind.version, group=kind.group, extra_problems=dups
        )
        request[FIELD_WARNINGS_KEY] = warnings
        return new

    def _unknown_custom_fields(
        self, request: web.Request, kind: KindInfo, obj: dict, level: str, duplicates: list[str]
    ) -> None:
        """Field validation of a custom resource: the keys the body repeats
        (``duplicates``) and the fields its schema would prune are refused (Strict) or
        named in warnings (Warn); Ignore lets pruning drop them (the last value of a
        repeated key stands)."""
        if level == "Ignore":
            return
        unknown = self.store.strategy(kind).unknown_fields({**obj, "apiVersion": kind.api_version}) or []
        problems = duplicates + [fieldvalidation.unknown_field(p) for p in unknown]
        if problems and level == "Strict":
            raise st.bad_request(
                f'{kind.kind} in version "{kind.version}" cannot be handled as a {kind.kind}: '
                f"strict decoding error: {', '.join(problems)}"
            )
        request[FIELD_WARNINGS_KEY] = problems

    @staticmethod
    def _served_apply_body(request: web.Request, body: bytes) -> bytes:
        """An apply body sent on an alias group's path in the client's spelling of the
        group, re-encoded in ours (the apply code checks the kind's own apiVersion);
        any other body as it is. Field validation still reads the original bytes."""
        alias = request.get(GROUP_ALIAS_KEY)
        if alias is None or alias.requested.encode() not in body:
            return body
        doc = codec.decode_object_body(body, "application/yaml").obj
        return codec.dumps(alias.to_served(doc)) if isinstance(doc, dict) else body

    def _check_name_in_body(self, kind: KindInfo, info: RequestInfo, obj: dict) -> dict:
        """An update's body: the namespace and name it names are the path's (400
        otherwise), the name filled in when it names none. Returns its metadata."""
        self._check_namespace_in_body(kind, info, obj)
        md = obj["metadata"]
        if md.get("name") not in (None, "") and md["name"] != info.name:
            raise st.bad_request(
                f"the name of the object ({md['name']}) does not match the name on the URL ({info.name})"
            )
        md["name"] = info.name
        return md

    def _check_namespace_in_body(self, kind: KindInfo, info: RequestInfo, obj: dict) -> None:
        md = obj.setdefault("metadata", {})
        if kind.namespaced:
            body_ns = md.get("namespace")
            if body_ns not in (None, "") and body_ns != info.namespace:
                raise st.bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )

    # --- dispatch ---------------------------------------------------------------------
    async def handle(self, request: web.Request, info: RequestInfo, user: UserInfo) -> web.StreamResponse:
        kind = info.kind
        if kind is None:
            return await self._unregistered(request, info, user)
        if kind.namespaced and info.verb in ("create", "update", "patch", "delete", "get") and not info.namespace:
            if info.verb == "create" and not info.name:
                # A namespaced kind's all-namespaces collection only reads.
                raise st.method_not_allowed()
            raise st.ApiError(404, "NotFound", "the server could not find the requested resource")
        if not kind.namespaced and info.namespace:
            raise st.ApiError(404, "NotFound", "the server could not find the requested resource")
        if kind.custom:
            self._custom_media(request, info)
        if info.subresource:
            return await self._subresource(request, info, kind, user)
        verb = info.verb
        if verb not in kind.verbs:
            raise st.method_not_allowed(f"{verb} is not supported on resources of kind {kind.qualified_resource}")
        if verb in ("get", "list"):
            rest = self.rest.collection(kind)
            if rest is not None:  # a kind served by its own REST object (the resource metrics)
                target = negotiate(request.headers.get("Accept"), table_ok=False)
                ctx = self._context(request, info, kind, user)
                if verb == "get" and isinstance(rest, Getter):
                    return await self._respond_obj(request, await rest.get(ctx), 200, target)
                if verb == "list" and isinstance(rest, Lister):
                    return await self._respond_obj(request, await rest.list(ctx), 200, target)
                raise st.method_not_allowed(f"{verb} is not supported on {kind.qualified_resource}")
        if verb == "get":
            return await self.get(request, info, kind)
        if verb == "list":
            return await self.list(request, info, kind)
        if verb == "watch":
            return await self.watch(request, info, kind)
        if verb == "create":
            if info.name:
                raise st.method_not_allowed()
            rest = self.rest.collection(kind)
            if rest is not None:  # a kind served by its own REST object (the reviews)
                return await self._rest_create(request, info, kind, user, rest)
            return await self.create(request, info, kind, user)
        if verb == "update":
            return await self.update(request, info, kind, user)
        if verb == "patch":
            return await self.patch(request, info, kind, user)
        if verb == "delete":
            return await self.delete(request, info, kind, user)
        if verb == "deletecollection":
            return await self.delete_collection(request, info, kind, user)
        raise st.method_not_allowed()

    @staticmethod
    def _custom_media(request: web.Request, info: RequestInfo) -> None:
        """Custom resources have no protobuf form: a request that accepts only protobuf
        is answered 406, a protobuf body 415 (as upstream). The scale sub-resource is a
        built-in kind and keeps every form."""
        if info.subresource == "scale":
            return
        negotiate(request.headers.get("Accept"), protobuf_ok=False)
        if request.method in ("POST", "PUT") and _content_type(request) in PROTOBUF_TYPES:
            raise st.unsupported_media_type(
                f"the body of the request was in an unknown format ({_content_type(request)}) - accepted media "
                "types include: application/json, application/yaml"
            )

    @property
    def rest(self) -> RestTable:
        return self.server.rest

    async def _unregistered(self, request: web.Request, info: RequestInfo, user: UserInfo) -> web.StreamResponse:
        """A path that only an alias group serves, without a kind of ours (older
        SelfSubjectReview versions, the empty CRD list); anything else is a 404."""
        rest = None
        if info.alias is not None and not info.subresource and not info.name:
            rest = self.rest.unregistered.get((info.group, info.version, info.resource))
        if rest is None:
            require_kind(info)  # the 404
        if info.verb == "create" and not info.namespace and isinstance(rest, Creater):
            return await self._rest_create(request, info, None, user, rest)
        if info.verb == "list" and not info.namespace and isinstance(rest, Lister):
            target = negotiate(request.headers.get("Accept"), table_ok=False)
            out = await rest.list(self._context(request, info, None, user))
            return await self._respond_obj(request, out, 200, target)
        if info.namespace:
            raise st.ApiError(404, "NotFound", "the server could not find the requested resource")
        raise st.method_not_allowed(f"{info.verb} is not supported on {info.resource}")

    def _context(
        self,
        request: web.Request,
        info: RequestInfo,
        kind: KindInfo | None,
        user: UserInfo,
        wp: WriteParams | None = None,
    ) -> RequestContext:
        return RequestContext(
            user=user,
            kind=kind,
            verb=info.verb,
            namespace=info.namespace,
            name=info.name,
            subresource=info.subresource,
            version=info.version,
            requested_group=info.requested_group,
            dry_run=wp.dry_run if wp is not None else False,
            field_manager=wp.field_manager if wp is not None else "",
            field_validation=wp.field_validation if wp is not None else "Warn",
            query=request.query,
            authorize_as=lambda verb: self.server.authorize(user, dataclasses.replace(info, verb=verb), request.query),
        )

    @staticmethod
    def _body_kind(kind: KindInfo | None, sub: Subresource | None) -> tuple[str | None, str | None]:
        """The kind and apiVersion a body must name: the sub-resource's own kind
        (Binding, Eviction, Scale, TokenRequest) or the kind itself (None: the
        kind's, in either spelling on an alias group's path)."""
        if sub is None:
            return None, None
        if sub.version:
            return sub.kind, f"{sub.group}/{sub.version}" if sub.group else sub.version
        return sub.kind, None

    async def _rest_create(
        self,
        request: web.Request,
        info: RequestInfo,
        kind: KindInfo | None,
        user: UserInfo,
        rest: Creater,
        sub: Subresource | None = None,
    ) -> web.StreamResponse:
        """POST to a REST object: options, the body decoded as its kind, the object's answer."""
        wp = WriteParams.parse(request)
        if not decodes_body(rest):
            await self._read_body(request)
            obj: dict = {}
        else:
            body_kind = kind or self.server.registry.by_resource(info.group, "v1", info.resource)
            assert body_kind is not None
            want_kind, want_av = self._body_kind(kind, sub)
            obj = await self._decode_object(
                request,
                body_kind,
                expect_kind=want_kind,
                expect_api_version=want_av,
                validate=validates_body_fields(rest),
            )
        code, out = await rest.create(self._context(request, info, kind, user, wp), obj)
        body_alias = request.get(BODY_ALIAS_KEY)
        if body_alias is not None:  # answered in the spelling the body used
            body_alias.to_requested(out)
        return await self._respond_obj(request, out, code, JSON if wp.target.form == "table" else wp.target)

    async def _subresource(
        self, request: web.Request, info: RequestInfo, kind: KindInfo, user: UserInfo
    ) -> web.StreamResponse:
        """A declared sub-resource, served by the REST object its declaration names."""
        sub = kind.subresource(info.subresource)
        if sub is None:
            raise st.ApiError(
                404,
                "NotFound",
                f"the server could not find the requested resource ({kind.resource}/{info.subresource})",
            )
        if sub.verbs and info.verb not in sub.verbs:
            raise st.method_not_allowed(f"{info.verb} is not supported on {kind.resource}/{sub.name}")
        rest = self.rest.subresource(kind, sub.name)
        verb = info.verb
        if isinstance(rest, StoreSubresource):
            if verb == "get":
                return await self.get(request, info, kind)
            if verb == "update":
                return await self.update(request, info, kind, user, subresource=sub.name)
            if verb == "patch":
                return await self.patch(request, info, kind, user, subresource=sub.name)
        elif isinstance(rest, Connecter):
            return await rest.connect(self._context(request, info, kind, user), request)
        elif verb == "create" and isinstance(rest, Creater):
            return await self._rest_create(request, info, kind, user, rest, sub)
        elif verb == "get" and isinstance(rest, Getter):
            target = negotiate(request.headers.get("Accept"), table_ok=False)
            return await self._respond_obj(
                request, await rest.get(self._context(request, info, kind, user)), 200, target
            )
        elif verb == "update" and isinstance(rest, Updater):
            return await self._rest_update(request, info, kind, user, rest, sub)
        elif verb == "patch" and isinstance(rest, Patcher):
            return await self._rest_patch(request, info, kind, user, rest)
        raise st.ApiError(
            404,
            "NotFound",
            f"the server could not find the requested resource "
            f"({kind.resource}/{info.subresource}) for verb {info.verb}",
        )

    async def _rest_update(
        self, request: web.Request, info: RequestInfo, kind: KindInfo, user: UserInfo, rest: Updater, sub: Subresource
    ) -> web.StreamResponse:
        wp = WriteParams.parse(request, "UpdateOptions")
        want_kind, want_av = self._body_kind(kind, sub)
        obj = await self._decode_object(request, kind, expect_kind=want_kind, expect_api_version=want_av)
        if want_kind == kind.kind and want_av is None:  # the object itself: it names this one
            self._check_name_in_body(kind, info, obj)
        code, out = await rest.update(self._context(request, info, kind, user, wp), obj)
        return await self._respond_obj(request, out, code, JSON if wp.target.form == "table" else wp.target)

    async def _rest_patch(
        self, request: web.Request, info: RequestInfo, kind: KindInfo, user: UserInfo, rest: Patcher
    ) -> web.StreamResponse:
        ctype = _content_type(request)
        if ctype not in rest.patch_types:
            raise st.unsupported_media_type(
                f"patches of the {info.subresource} sub-resource must be {', '.join(rest.patch_types)}, "
                f"not {ctype or 'none'}"
            )
        body = await self._read_body(request)
        wp = WriteParams.parse(request, "PatchOptions", ctype)
        doc = self._patch_document(ctype, body)
        # A strategic merge patch merges by the schema of what is patched (e.g. autoscaling/v1 Scale).
        schema = schema_for(*rest.patch_kind)
        code, out = await rest.patch(
            self._context(request, info, kind, user, wp), lambda current: apply_patch(ctype, current, doc, schema)
        )
        return await self._respond_obj(request, out, code, JSON if wp.target.form == "table" else wp.target)

    @staticmethod
    def _patch_document(ctype: str, body: bytes) -> Any:
        doc = codec.decode_body(body, "application/json")
        if ctype == names.MEDIA_MERGE_PATCH and not isinstance(doc, dict):
            raise st.bad_request("a merge patch must be a JSON object")
        if ctype == names.MEDIA_STRATEGIC_MERGE_PATCH and not isinstance(doc, dict):
            raise st.bad_request("a strategic merge patch must be a JSON object")
        if ctype == names.MEDIA_JSON_PATCH and not isinstance(doc, list):
            raise st.bad_request("a json patch must be a JSON array of operations")
        return doc

    # --- reads ------------------------------------------------------------------------
    async def get(self, request: web.Request, info: RequestInfo, kind: KindInfo) -> web.StreamResponse:
        target = negotiate(request.headers.get("Accept"))
        include = validate_include_object(request.query.get("includeObject"))
        raw, rev = await self.store.get(kind, info.namespace, info.name, request.query.get("resourceVersion"))
        return await self._respond_raw(request, codec.splice_rv(raw, rev), 200, target, kind, include)

    async def list(self, request: web.Request, info: RequestInfo, kind: KindInfo) -> web.StreamResponse:
        q = request.query
        target = negotiate(request.headers.get("Accept"))
        include = validate_include_object(q.get("includeObject"))
        ls, fs = request_selectors(kind, q, request.get(GROUP_ALIAS_KEY))
        limit = _int_param(q, "limit")
        if limit < 0:
            raise st.bad_request(f"invalid limit {limit}: must not be negative")
        res = await self.store.list(
            kind,
            info.namespace or None,
            ls,
            fs,
            q.get("resourceVersion"),
            q.get("resourceVersionMatch"),
            limit,
            q.get("continue"),
        )
        # Large lists are built in slices that give the event loop back (server/listbody.py).
        lane = self.turns.lane(request)
        alias = request.get(GROUP_ALIAS_KEY)
        pretty = self._pretty(request)
        if target.form == "json" and not pretty:
            body = await listbody.json_list(kind, res, lane)
            if alias is not None:
                body = codec.dumps(alias.to_requested(await alias.convert(codec.load_json(body))))
            return web.Response(body=body, content_type="application/json")
        if target.form == "table":
            list_md: dict[str, Any] = {
                "resource_version": str(res.resource_version),
                "continue_token": res.continue_token,
                "remaining": res.remaining,
            }
            if alias is None and not pretty:
                keep = auditing.records_response()
                tbl = table(kind, [], target, include, **list_md)
                body = await listbody.table_list(tbl, kind, res, include, target, lane, keep)
                if keep:
                    request[RESPONSE_OBJECT_KEY] = tbl
                return self._with_warnings(request, web.Response(body=body, content_type="application/json"))
            objs = await listbody.decode_items(res, lane)
            if alias is not None:  # the columns read the objects in the requested version
                objs = (await alias.convert({"kind": "List", "items": objs}))["items"]
            return await self._respond_obj(request, table(kind, objs, target, include, **list_md), 200, JSON)
        if target.form == "protobuf" and alias is None:
            item_schema = listbody.protobuf_schema(kind)
            if item_schema is not None:
                body, listed = await listbody.protobuf_list(kind, res, item_schema, lane, auditing.records_response())
                if listed is not None:
                    request[RESPONSE_OBJECT_KEY] = listed
                return self._with_warnings(request, web.Response(body=body, content_type=target.content_type))
        return await self._respond_obj(request, codec.load_json(await listbody.json_list(kind, res, lane)), 200, target)

    # --- watch ------------------------------------------------------------------------
    async def watch(self, request: web.Request, info: RequestInfo, kind: KindInfo) -> web.StreamResponse:
        q = request.query
        target = negotiate(request.headers.get("Accept"))
        include = validate_include_object(q.get("includeObject"))
        ls, fs = request_selectors(kind, q, request.get(GROUP_ALIAS_KEY))
        bookmarks = _bool_param(q, "allowWatchBookmarks")
        send_initial = _bool_param(q, "sendInitialEvents") if "sendInitialEvents" in q else None
        rv_match = q.get("resourceVersionMatch", "")
        n = parse_rv(q.get("resourceVersion"))
        if send_initial is not None:
            if not self.server.opts.feature("WatchList") and send_initial:
                raise st.bad_request("sendInitialEvents is only supported with the WatchList feature gate enabled")
            if rv_match != "NotOlderThan":
                raise st.bad_request(
                    "sendInitialEvents is forbidden for watch unless resourceVersionMatch is set to NotOlderThan"
                )
        elif rv_match:
            raise st.bad_request("resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided")
        timeout_s = _int_param(q, "timeoutSeconds", -1)
        if timeout_s < 0:
            base = self.server.opts.min_request_timeout
            timeout_s = int(base * (1 + random.random()))
        cache = self.cache.cache(key_prefix(kind))
        namespace = info.namespace if kind.namespaced and info.namespace else None

        initial: list = []
        start_rv = 0
        if send_initial or n is None or n == 0:
            if n is None:
                if await self.cache.sync() is None:
                    raise st.service_unavailable("the watch cache is not in sync with storage", retry_after=1)
            elif n > 0 and not await self.cache.wait_for(n, 3.0):
                raise st.too_large_resource_version(n, self.cache.rv)
            watcher = Watcher(cache, namespace, ls, fs)
            cache.add_watcher(watcher)
            start_rv = self.cache.rv
            if send_initial is not False:
                initial = [e for e in cache.sorted_entries(namespace) if watcher.matches(e)]
            past: list[CacheEvent] = []
        else:
            if n > self.cache.rv and not await self.cache.wait_for(n, 3.0):
                raise st.too_large_resource_version(n, self.cache.rv)
            watcher = Watcher(cache, namespace, ls, fs)
            try:
                past = cache.events_after(n)
            except CompactedError as exc:
                return await self._watch_gone(request, target, n, exc.compacted)
            cache.add_watcher(watcher)
            start_rv = n
        self.server.metrics.watchers_inc(kind, 1)
        # A watch on an alias group re-encodes each event in the client's spelling instead of
        # writing the cache's shared JSON frames.
        alias = request.get(GROUP_ALIAS_KEY)
        fast_json = target.form == "json" and alias is None
        resp = web.StreamResponse(status=200)
        resp.content_type = "application/json"
        if target.form == "protobuf":  # length-prefixed WatchEvent frames, as upstream
            resp.headers["Content-Type"] = f"{target.content_type};stream=watch"
        resp.enable_chunked_encoding()
        resp.headers["Cache-Control"] = "no-cache, private"
        try:
            await resp.prepare(request)
            sent_columns = False
            last_rv = start_rv

            async def send(ev_type: str, entry_raw_rv: tuple[bytes, int] | None, cev: CacheEvent | None = None):
                nonlocal sent_columns
                if fast_json and cev is not None:
                    await resp.write(cev.json_frame())
                    return
                raw, rv = entry_raw_rv
                if target.form == "table":
                    obj = codec.decode_stored(raw, rv)
                    if alias is not None:
                        obj = alias.to_requested(await alias.convert(obj))
                    tbl = table(kind, [obj], target, include, resource_version=str(rv), with_columns=not sent_columns)
                    sent_columns = True
                    await resp.write(codec.dumps({"type": ev_type, "object": tbl}) + b"\n")
                elif target.form == "protobuf":
                    obj = codec.decode_stored(raw, rv)
                    await resp.write(
                        self._watch_frame(
                            target, ev_type, obj if alias is None else alias.to_requested(await alias.convert(obj))
                        )
                    )
                else:
                    frame = b'{"type":"%s","object":%s}\n' % (ev_type.encode(), codec.splice_rv(raw, rv))
                    await resp.write(frame if alias is None else await alias.watch_frame_converted(frame))

            for e in initial:
                await send("ADDED", (e.raw, e.rv))
            if send_initial and bookmarks:
                await resp.write(self._bookmark(kind, start_rv, initial_end=True, target=target, alias=alias))
            for cev in past:
                out = watcher.filter(cev)
                if out is not None:
                    await send(out.type, (out.entry.raw, out.entry.rv), out)
                    last_rv = out.rv
            if fast_json and request.transport is not None:
                # From here on the cache's fan-out writes each event straight to the
                # connection (no task wake-up per watcher); what queued meanwhile goes first.
                sink = chunked_transport_sink(request.transport)
                while pending := watcher.attach_sink(sink):
                    pending = [cev for cev in pending if cev.rv > last_rv]
                    if pending:
                        last_rv = pending[-1].rv
                        await resp.write(b"".join(cev.json_frame() for cev in pending))
            deadline = time.monotonic() + timeout_s
            interval = self.server.opts.watch_bookmark_interval
            next_bookmark = time.monotonic() + interval
            while True:
                now = time.monotonic()
                remaining = deadline - now
                if remaining <= 0:
                    break
                # Wake up at least every few seconds to notice a client that went away.
                wait = min(remaining, WATCH_LIVENESS_CHECK, max(0.0, next_bookmark - now) if bookmarks else remaining)
                try:
                    batch = await watcher.next_batch(wait)
                except asyncio.TimeoutError:
                    if request.transport is None or request.transport.is_closing():
                        break
                    if bookmarks and time.monotonic() >= next_bookmark and deadline - time.monotonic() > 0:
                        await resp.write(self._bookmark(kind, max(last_rv, self.cache.rv), target=target, alias=alias))
                        next_bookmark = time.monotonic() + interval
                    continue
                batch = [cev for cev in batch if cev.rv > start_rv or cev.rv > last_rv]
                if not batch:
                    continue
                last_rv = batch[-1].rv
                if fast_json:
                    # One write for everything queued: one TLS record, one send.
                    await resp.write(b"".join(cev.json_frame() for cev in batch))
                else:
                    for cev in batch:
                        await send(cev.type, (cev.entry.raw, cev.entry.rv), cev)
        except st.ApiError as exc:
            # An event that cannot be shown (a conversion webhook failed): an ERROR event ends the watch.
            await resp.write(self._watch_frame(target, "ERROR", exc.to_status()))
        except WatcherClosed as exc:
            # Dropped for falling behind, a cache resync or shutdown: the stream just
            # ends, and the client watches again from the last version it saw.
            log.debug("watch on %s ended: %s", kind.qualified_resource, exc.reason)
        except ConnectionError:
            pass  # the client went away
        finally:
            watcher.close("")
            self.server.metrics.watchers_inc(kind, -1)
        try:
            await resp.write_eof()
        except (ConnectionError, RuntimeError):
            pass
        return resp

    def _bookmark(
        self, kind: KindInfo, rv: int, initial_end: bool = False, target: Target = JSON, alias: GroupAlias | None = None
    ) -> bytes:
        md: dict[str, Any] = {"resourceVersion": str(rv)}
        if initial_end:
            md["annotations"] = {names.ANNOTATION_INITIAL_EVENTS_END: "true"}
        obj = {
            "kind": kind.kind,
            "apiVersion": kind.api_version if alias is None else alias.requested_api_version,
            "metadata": md,
        }
        if target.form == "protobuf":
            return self._watch_frame(target, "BOOKMARK", obj)
        return codec.dumps({"type": "BOOKMARK", "object": obj}) + b"\n"

    @staticmethod
    def _watch_frame(target: Target, ev_type: str, obj: dict) -> bytes:
        """One watch event in the negotiated form: a JSON line, or (protobuf) a
        length-prefixed WatchEvent whose object is enveloped protobuf (JSON
        bytes inside the event for an object without a protobuf encoding)."""
        if target.form == "protobuf":
            inner = protobuf_body(obj)
            return protobuf.watch_frame(ev_type, inner if inner is not None else codec.dumps(obj))
        return codec.dumps({"type": ev_type, "object": obj}) + b"\n"

    async def _watch_gone(self, request: web.Request, target: Target, n: int, floor: int) -> web.StreamResponse:
        resp = web.StreamResponse(status=200)
        resp.content_type = "application/json"
        if target.form == "protobuf":
            resp.headers["Content-Type"] = f"{target.content_type};stream=watch"
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        status = st.gone(f"too old resource version: {n} ({floor + 1})").to_status()
        await resp.write(self._watch_frame(target, "ERROR", status))
        await resp.write_eof()
        return resp

    # --- writes -----------------------------------------------------------------------
    async def _authorize_create(self, info: RequestInfo, user: UserInfo) -> None:
        """An update or apply about to create a missing object is authorized again as
        ``create`` of that name (upstream's create-on-update check): patch or update
        alone never creates. A denial is the usual 403."""
        await self.server.authorize(user, dataclasses.replace(info, verb="create"))

    async def create(
        self, request: web.Request, info: RequestInfo, kind: KindInfo, user: UserInfo
    ) -> web.StreamResponse:
        wp = WriteParams.parse(request)
        obj = await self._decode_object(request, kind)
        self._check_namespace_in_body(kind, info, obj)
        _, raw = await self.store.create(
            kind, info.namespace, obj, user, dry_run=wp.dry_run, field_manager=wp.field_manager
        )
        return await self._respond_raw(request, raw, 201, wp.target, kind)

    async def update(
        self, request: web.Request, info: RequestInfo, kind: KindInfo, user: UserInfo, subresource: str = ""
    ) -> web.StreamResponse:
        wp = WriteParams.parse(request, "UpdateOptions")
        target, dry = wp.target, wp.dry_run
        body = await self._decode_object(request, kind)
        md = self._check_name_in_body(kind, info, body)
        allow_create = kind.create_on_update and not subresource

        def compute(old: dict) -> dict:
            return codec.load_json(codec.dumps(body))

        async def on_missing() -> dict:
            if md.get("resourceVersion"):
                raise st.not_found(kind.resource, info.name, kind.group)
            await self._authorize_create(info, user)
            return codec.load_json(codec.dumps(body))

        obj, raw, created = await self.store.update(
            kind,
            info.namespace,
            info.name,
            compute,
            user,
            subresource=subresource,
            dry_run=dry,
            create_on_missing=allow_create,
            on_missing=on_missing,
            field_manager=wp.field_manager,
        )
        return await self._respond_raw(request, raw, 201 if created else 200, target, kind)

    async def patch(
        self, request: web.Request, info: RequestInfo, kind: KindInfo, user: UserInfo, subresource: str = ""
    ) -> web.StreamResponse:
        ctype = _content_type(request)
        if ctype == names.MEDIA_APPLY_PATCH:
            # Server-side apply: the merge, field ownership and conflicts live in managedfields.
            apply_body = await self._read_body(request)
            wp = WriteParams.parse(request, "PatchOptions", ctype)
            alias = request.get(GROUP_ALIAS_KEY)
            _, raw, created = await apply_request(
                self.store,
                kind,
                info.namespace,
                info.name,
                self._served_apply_body(request, apply_body),
                user,
                manager=wp.field_manager,
                force=wp.force,
                dry_run=wp.dry_run,
                subresource=subresource,
                validate=lambda new: self._validated_patch(request, kind, new, wp.field_validation, ctype, apply_body),
                authorize_create=lambda: self._authorize_create(info, user),
                convert_old=alias.convert if isinstance(alias, StorageVersionAlias) and alias.converter else None,
            )
            return await self._respond_raw(request, raw, 201 if created else 200, wp.target, kind)
        # Strategic merge patch reads its merge keys from the kind's schema (the same one
        # for the main resource and its status); a kind without one cannot take it.
        smp_schema = None
        if kind.custom and ctype not in (names.MEDIA_MERGE_PATCH, names.MEDIA_JSON_PATCH):
            raise st.unsupported_media_type(
                "the body of the request was in an unknown format - accepted media types include: "
                f"{names.MEDIA_JSON_PATCH}, {names.MEDIA_MERGE_PATCH}, {names.MEDIA_APPLY_PATCH}"
            )
        if ctype == names.MEDIA_STRATEGIC_MERGE_PATCH:
            smp_schema = schema_for(kind.group, kind.version, kind.kind)
            if smp_schema is None:
                raise st.unsupported_media_type(
                    f"strategic merge patch ({names.MEDIA_STRATEGIC_MERGE_PATCH}) is not supported for "
                    f"{kind.qualified_resource}: its kind declares no schema to take merge keys from; use a "
                    f"merge patch ({names.MEDIA_MERGE_PATCH}) or JSON patch ({names.MEDIA_JSON_PATCH})"
                )
        if ctype not in (names.MEDIA_MERGE_PATCH, names.MEDIA_JSON_PATCH) and smp_schema is None:
            raise st.unsupported_media_type(
                f"the body of the request was in an unknown format ({ctype or 'none'}) - accepted media types "
                "include: application/json-patch+json, application/merge-patch+json, "
                "application/strategic-merge-patch+json"
            )
        body = await self._read_body(request)
        # Options after the media type and the body, as upstream's patch handler orders them.
        wp = WriteParams.parse(request, "PatchOptions", ctype)
        target, dry = wp.target, wp.dry_run
        doc = self._patch_document(ctype, body)

        alias = request.get(GROUP_ALIAS_KEY)

        async def compute(old: dict) -> dict:
            if isinstance(alias, StorageVersionAlias):  # patched in the version the client asked for
                old = alias.to_requested(await alias.convert(old))
            new = patch_object(ctype, old, doc, smp_schema)
            return self._validated_patch(request, kind, new, wp.field_validation, ctype, body)

        obj, raw, _ = await self.store.update(
            kind,
            info.namespace,
            info.name,
            compute,
            user,
            subresource=subresource,
            dry_run=dry,
            operation="UPDATE",
            field_manager=wp.field_manager,
        )
        return await self._respond_raw(request, raw, 200, target, kind)

    async def _delete_options(self, request: web.Request) -> DeleteOptions:
        q = request.query
        opts = DeleteOptions(dry_run=_dry_run(q, "DeleteOptions"))
        body = await self._read_body(request) if request.can_read_body else b""
        if body.strip():
            ctype = _content_type(request)
            if ctype in PROTOBUF_TYPES:
                doc = self._decode_protobuf(body).obj
            else:
                doc = codec.decode_body(body, "application/yaml" if ctype in BODY_TYPES_YAML else "application/json")
            if not isinstance(doc, dict):
                raise st.bad_request("DeleteOptions must be an object")
            if doc.get("kind") not in (None, "", "DeleteOptions"):
                raise st.bad_request(f"the body must be DeleteOptions, not {doc.get('kind')}")
            if "gracePeriodSeconds" in doc and doc["gracePeriodSeconds"] is not None:
                if not isinstance(doc["gracePeriodSeconds"], int):
                    raise st.bad_request("gracePeriodSeconds must be an integer")
                opts.grace_period_seconds = doc["gracePeriodSeconds"]
            if doc.get("propagationPolicy"):
                opts.propagation_policy = doc["propagationPolicy"]
            if doc.get("orphanDependents") is not None and not opts.propagation_policy:
                opts.propagation_policy = "Orphan" if doc["orphanDependents"] else "Background"
            pre = doc.get("preconditions") or {}
            if not isinstance(pre, dict):
                raise st.bad_request("preconditions must be an object")
            opts.preconditions_uid = pre.get("uid") or None
            opts.preconditions_rv = pre.get("resourceVersion") or None
            dr = doc.get("dryRun") or []
            if dr:
                if dr != ["All"]:
                    raise st.bad_request(f'Invalid dry run value {dr!r}: the only supported value is "All"')
                opts.dry_run = True
        if "gracePeriodSeconds" in q:
            opts.grace_period_seconds = _int_param(q, "gracePeriodSeconds")
        if q.get("propagationPolicy"):
            opts.propagation_policy = q["propagationPolicy"]
        if q.get("orphanDependents") and not opts.propagation_policy:
            opts.propagation_policy = "Orphan" if _bool_param(q, "orphanDependents") else "Background"
        if opts.propagation_policy not in (None, "Orphan", "Background", "Foreground"):
            raise st.bad_request(
                f"invalid propagationPolicy {opts.propagation_policy!r}: must be Orphan, Background or Foreground"
            )
        return opts

    async def delete(
        self, request: web.Request, info: RequestInfo, kind: KindInfo, user: UserInfo
    ) -> web.StreamResponse:
        target = negotiate(request.headers.get("Accept"))
        opts = await self._delete_options(request)
        obj, raw, deleted = await self.store.delete(kind, info.namespace, info.name, opts, user)
        if not deleted or kind.resource == "pods":
            return await self._respond_raw(request, raw, 200, target, kind)
        md = obj.get("metadata") or {}
        status = st.success_status(
            {"name": md.get("name", ""), "group": kind.group, "kind": kind.resource, "uid": md.get("uid", "")}
        )
        return await self._respond_obj(request, status, 200, target)

    async def delete_collection(
        self, request: web.Request, info: RequestInfo, kind: KindInfo, user: UserInfo
    ) -> web.StreamResponse:
        q = request.query
        target = negotiate(request.headers.get("Accept"))
        opts = await self._delete_options(request)
        ls, fs = request_selectors(kind, q, request.get(GROUP_ALIAS_KEY))
        res = await self.store.list(kind, info.namespace or None, ls, fs, None, None, 0, None)
        for raw, rev in res.items:
            md = codec.decode_stored(raw, rev)["metadata"]
            try:
                await self.store.delete(kind, md.get("namespace", ""), md["name"], opts, user)
            except st.ApiError as exc:
                if exc.code != 404:
                    raise
        return await self._respond_obj(request, st.success_status(), 200, target)
