"""Access reviews (``authorization.orch.io/v1``): ask the authorizer a question.

``SubjectAccessReview`` (may user U do X?), ``LocalSubjectAccessReview`` (the
same, within one namespace), ``SelfSubjectAccessReview`` (may I do X?) and
``SelfSubjectRulesReview`` (what may I do in namespace N?). They are
create-only and never stored: the answer is the created object's status.

``kubectl auth can-i`` hard-codes ``POST`` to ``selfsubjectaccessreviews`` in the
upstream spelling of the group (``names.UPSTREAM_AUTHORIZATION_GROUP``, a group
alias the router resolves to ours) with a protobuf body and no JSON fallback, so
the reviews have a small decoder for the protobuf envelope (magic ``6b 38 73 00``,
then runtime.Unknown) and the review messages, and answer in the group spelling
the client used. Field numbers are upstream's generated.proto (v1.27).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from aiohttp import web

from ..api import codec, names
from ..api import status as st
from ..api.user import UserInfo
from ..api.validation import FieldError, causes
from ..authn.authenticator import Unauthorized
from ..authz.authorizer import AuthzAttributes, Decision, Union

if TYPE_CHECKING:
    from .context import ServerContext
    from .routing import RequestInfo

REVIEW_KINDS = {
    "subjectaccessreviews": "SubjectAccessReview",
    "selfsubjectaccessreviews": "SelfSubjectAccessReview",
    "localsubjectaccessreviews": "LocalSubjectAccessReview",
    "selfsubjectrulesreviews": "SelfSubjectRulesReview",
}
PROTOBUF_TYPES = (names.MEDIA_PROTOBUF, names.MEDIA_PROTOBUF_UPSTREAM)


# --- protobuf -----------------------------------------------------------------------------


class ProtobufError(ValueError):
    pass


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise ProtobufError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ProtobufError("varint too long")


def fields(buf: bytes) -> list[tuple[int, int, Any]]:
    """(field number, wire type, value) in order; values of wire type 2 are bytes."""
    out = []
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise ProtobufError("field number 0")
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 2:
            length, pos = _varint(buf, pos)
            if pos + length > len(buf):
                raise ProtobufError(f"field {number}: truncated bytes")
            value, pos = buf[pos : pos + length], pos + length
        elif wire == 1:
            value, pos = buf[pos : pos + 8], pos + 8
        elif wire == 5:
            value, pos = buf[pos : pos + 4], pos + 4
        else:
            raise ProtobufError(f"field {number}: unsupported wire type {wire}")
        if pos > len(buf):
            raise ProtobufError(f"field {number}: truncated")
        out.append((number, wire, value))
    return out


def _text(value: Any) -> str:
    if not isinstance(value, bytes):
        raise ProtobufError("expected a length-delimited string")
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        raise ProtobufError("a string field is not UTF-8") from None


def _strings(buf: bytes, numbers: dict[int, str], repeated: tuple[int, ...] = ()) -> dict:
    out: dict[str, Any] = {}
    for n, _w, v in fields(buf):
        name = numbers.get(n)
        if name is None:
            continue
        if n in repeated:
            out.setdefault(name, []).append(_text(v))
        else:
            out[name] = _text(v)
    return out


_RESOURCE_ATTRIBUTES = {1: "namespace", 2: "verb", 3: "group", 4: "version", 5: "resource", 6: "subresource", 7: "name"}
_NON_RESOURCE_ATTRIBUTES = {1: "path", 2: "verb"}


def _access_spec(buf: bytes, with_subject: bool) -> dict:
    spec: dict[str, Any] = {}
    for n, _w, v in fields(buf):
        if n == 1:
            spec["resourceAttributes"] = _strings(v, _RESOURCE_ATTRIBUTES)
        elif n == 2:
            spec["nonResourceAttributes"] = _strings(v, _NON_RESOURCE_ATTRIBUTES)
        elif with_subject and n == 3:
            spec["user"] = _text(v)
        elif with_subject and n == 4:
            spec.setdefault("groups", []).append(_text(v))
        elif with_subject and n == 5:
            entry = {num: val for num, _ww, val in fields(v)}
            key = _text(entry.get(1, b""))
            items = [_text(x) for num, _ww, x in fields(entry.get(2, b"")) if num == 1]
            spec.setdefault("extra", {})[key] = items
        elif with_subject and n == 6:
            spec["uid"] = _text(v)
    return spec


def decode_review(kind: str, buf: bytes) -> dict:
    """A review message (without the envelope) as its JSON form."""
    obj: dict[str, Any] = {"metadata": {}}
    for n, _w, v in fields(buf):
        if n == 1:
            obj["metadata"] = _strings(v, {1: "name", 2: "generateName", 3: "namespace"})
        elif n == 2:
            if kind == "SelfSubjectRulesReview":
                obj["spec"] = _strings(v, {1: "namespace"})
            else:
                obj["spec"] = _access_spec(v, with_subject=kind in ("SubjectAccessReview", "LocalSubjectAccessReview"))
    obj.setdefault("spec", {})
    return obj


def decode_envelope(body: bytes) -> tuple[str, str, bytes]:
    """(apiVersion, kind, raw message) from the magic-prefixed runtime.Unknown."""
    if not body.startswith(names.PROTOBUF_MAGIC):
        raise ProtobufError("the body does not start with the protobuf magic bytes")
    api_version = kind = ""
    raw = b""
    for n, _w, v in fields(body[len(names.PROTOBUF_MAGIC) :]):
        if n == 1:
            tm = _strings(v, {1: "apiVersion", 2: "kind"})
            api_version, kind = tm.get("apiVersion", ""), tm.get("kind", "")
        elif n == 2:
            if not isinstance(v, bytes):
                raise ProtobufError("raw must be bytes")
            raw = v
        elif n == 3 and v:
            raise ProtobufError(f"content encoding {_text(v)!r} is not supported")
    return api_version, kind, raw


# --- evaluation -----------------------------------------------------------------------------


def spec_attributes(user: UserInfo, spec: dict) -> AuthzAttributes:
    ra, nra = spec.get("resourceAttributes"), spec.get("nonResourceAttributes")
    if isinstance(ra, dict):
        g = lambda k: str(ra.get(k) or "")  # noqa: E731
        return AuthzAttributes(
            user,
            g("verb"),
            True,
            namespace=g("namespace"),
            api_group=g("group"),
            api_version=g("version"),
            resource=g("resource"),
            subresource=g("subresource"),
            name=g("name"),
        )
    nra = nra if isinstance(nra, dict) else {}
    return AuthzAttributes(user, str(nra.get("verb") or ""), False, path=str(nra.get("path") or ""))


def access_status(authorizer: Union, attrs: AuthzAttributes) -> dict:
    decision, reason = authorizer.authorize(attrs)
    status: dict[str, Any] = {"allowed": decision is Decision.ALLOW}
    if decision is Decision.DENY:
        status["denied"] = True
    if reason:
        status["reason"] = reason
    return status


def rules_status(authorizer: Union, user: UserInfo, namespace: str) -> dict:
    res = authorizer.rules_for(user, namespace)
    status: dict[str, Any] = {
        "resourceRules": [
            {
                k: v
                for k, v in (
                    ("verbs", list(r.verbs)),
                    ("apiGroups", list(r.api_groups)),
                    ("resources", list(r.resources)),
                    ("resourceNames", list(r.resource_names)),
                )
                if v or k == "verbs"
            }
            for r in res.resource_rules
        ],
        "nonResourceRules": [
            {"verbs": list(r.verbs), "nonResourceURLs": list(r.non_resource_urls)} for r in res.non_resource_rules
        ],
        "incomplete": res.incomplete,
    }
    if res.errors:
        status["evaluationError"] = "; ".join(res.errors)
    return status


def _invalid(kind: str, field: str, value: Any, detail: str) -> st.ApiError:
    return st.invalid(kind, "", causes([FieldError.invalid(field, value, detail)]), names.AUTHORIZATION_GROUP)


def validate_access_spec(kind: str, spec: Any) -> None:
    if not isinstance(spec, dict):
        raise _invalid(kind, "spec", spec, "must be an object")
    ra, nra = spec.get("resourceAttributes"), spec.get("nonResourceAttributes")
    for field, v in (("resourceAttributes", ra), ("nonResourceAttributes", nra)):
        if v is not None and not isinstance(v, dict):
            raise _invalid(kind, f"spec.{field}", v, "must be an object")
    if ra is not None and nra is not None:
        raise _invalid(
            kind, "spec.nonResourceAttributes", nra, "cannot be specified in combination with resourceAttributes"
        )
    if ra is None and nra is None:
        raise _invalid(
            kind,
            "spec.resourceAttributes",
            None,
            "exactly one of nonResourceAttributes or resourceAttributes must be specified",
        )
    if kind in ("SubjectAccessReview", "LocalSubjectAccessReview"):
        if not spec.get("user") and not spec.get("groups"):
            raise _invalid(kind, "spec.user", spec.get("user", ""), "at least one of user or group must be specified")
        groups = spec.get("groups")
        if groups is not None and (not isinstance(groups, list) or not all(isinstance(g, str) for g in groups)):
            raise _invalid(kind, "spec.groups", groups, "must be an array of strings")
    if kind == "LocalSubjectAccessReview" and nra is not None:
        raise _invalid(kind, "spec.nonResourceAttributes", nra, "disallowed on this kind of request")


def _subject_user(spec: dict) -> UserInfo:
    extra = spec.get("extra") if isinstance(spec.get("extra"), dict) else {}
    return UserInfo(
        str(spec.get("user") or ""),
        uid=str(spec.get("uid") or ""),
        groups=tuple(spec.get("groups") or ()),
        extra={k: tuple(v or ()) for k, v in extra.items()},
    )


class Reviews:
    """Answers the four review resources, on our group and on its aliases."""

    def __init__(self, server: "ServerContext", authorizer: Callable[[], Union]):
        self.server = server
        self._authorizer = authorizer

    @staticmethod
    def handles(info: "RequestInfo") -> bool:
        return (
            info.is_resource
            and info.group == names.AUTHORIZATION_GROUP
            and info.version == "v1"
            and info.resource in REVIEW_KINDS
        )

    async def _body(self, request: web.Request, kind: str, group: str) -> dict:
        """The review in the body; its apiVersion may name our group or ``group``, the
        spelling the request's path used."""
        ctype = (request.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        body = await self.server.handlers._read_body(request)
        if ctype in PROTOBUF_TYPES:
            try:
                api_version, got_kind, raw = decode_envelope(body)
                obj = decode_review(kind, raw)
            except ProtobufError as exc:
                raise st.bad_request(f"the protobuf body of the {kind} could not be decoded: {exc}") from None
            obj["apiVersion"], obj["kind"] = api_version, got_kind
        elif ctype in ("application/json", "", "application/yaml", "application/x-yaml", "text/yaml"):
            decoded = codec.decode_object_body(
                body, "application/json" if ctype in ("application/json", "") else "application/yaml"
            )
            if not isinstance(decoded.obj, dict):
                raise st.bad_request(f"the request body must be a {kind} object")
            # Field validation as for any create (the schema is the same on both group
            # spellings); its warnings go on the response.
            obj = self.server.handlers._validate_fields(request, decoded, kind, f"{names.AUTHORIZATION_GROUP}/v1")
        else:
            raise st.unsupported_media_type(
                f"the body of the request was in an unknown format ({ctype}) - accepted media types include: "
                f"application/json, application/yaml, {names.MEDIA_PROTOBUF}"
            )
        if not isinstance(obj, dict):
            raise st.bad_request(f"the request body must be a {kind} object")
        got_kind, got_av = obj.get("kind"), obj.get("apiVersion")
        if got_kind not in (None, "") and got_kind != kind:
            raise st.bad_request(f"the kind in the data ({got_kind}) does not match the expected kind ({kind})")
        if got_av not in (None, "", f"{names.AUTHORIZATION_GROUP}/v1", f"{group}/v1"):
            raise st.bad_request(
                f"the API version in the data ({got_av}) does not match the expected API version ({group}/v1)"
            )
        md = obj.get("metadata")
        if md is not None and not isinstance(md, dict):
            raise st.bad_request("metadata: must be an object")
        return obj

    async def handle(self, request: web.Request, info: "RequestInfo", user: UserInfo) -> web.Response:
        kind = REVIEW_KINDS[info.resource]
        if info.verb != "create" or info.name or info.subresource:
            raise st.method_not_allowed(f"{info.verb} is not supported on {info.resource}: reviews are create-only")
        if kind == "LocalSubjectAccessReview":
            if not info.namespace:
                raise st.ApiError(404, "NotFound", "the server could not find the requested resource")
        elif info.namespace:
            raise st.ApiError(404, "NotFound", "the server could not find the requested resource")
        obj = await self._body(request, kind, info.requested_group)
        spec = obj.get("spec")
        authorizer = self._authorizer()
        if kind == "SelfSubjectRulesReview":
            if not isinstance(spec, dict):
                raise _invalid(kind, "spec", spec, "must be an object")
            namespace = spec.get("namespace") or ""
            if not isinstance(namespace, str) or not namespace:
                raise st.bad_request("no namespace on request")
            status = rules_status(authorizer, user, namespace)
        else:
            validate_access_spec(kind, spec)
            if kind == "LocalSubjectAccessReview":
                md_ns = (obj.get("metadata") or {}).get("namespace")
                if md_ns not in (None, "") and md_ns != info.namespace:
                    raise st.bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request"
                    )
                if (spec["resourceAttributes"].get("namespace") or "") != info.namespace:
                    raise st.bad_request(f"spec.resourceAttributes.namespace must match namespace: {info.namespace}")
            subject = user if kind == "SelfSubjectAccessReview" else _subject_user(spec)
            status = access_status(authorizer, spec_attributes(subject, spec))
        md = dict(obj.get("metadata") or {})
        md.setdefault("creationTimestamp", None)
        if kind == "LocalSubjectAccessReview":
            md["namespace"] = info.namespace
        out = {"kind": kind, "apiVersion": f"{info.requested_group}/v1", "metadata": md, "spec": spec, "status": status}
        accept = request.headers.get("Accept") or ""
        if "yaml" in accept and "json" not in accept:
            resp = web.Response(body=codec.dump_yaml(out), status=201, content_type="application/yaml")
        else:
            resp = web.Response(body=codec.dumps(out), status=201, content_type="application/json")
        return self.server.handlers._with_warnings(request, resp)


REVIEW_RESOURCES = {"tokenreviews": "TokenReview", "selfsubjectreviews": "SelfSubjectReview"}


# kubectl auth whoami posts to the upstream group, an alias of ours (v1 from 1.28,
# v1beta1 / v1alpha1 before; only v1 is served on our spelling).
UPSTREAM_SELF_SUBJECT_REVIEW_VERSIONS = ("v1", "v1beta1", "v1alpha1")


def user_info_json(user: UserInfo) -> dict:
    out: dict[str, Any] = {"username": user.name}
    if user.uid:
        out["uid"] = user.uid
    if user.groups:
        out["groups"] = list(user.groups)
    if user.extra:
        out["extra"] = {k: list(v) for k, v in user.extra.items()}
    return out


def _str_list(value: Any, field: str, kind: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise st.invalid(
            kind,
            "",
            causes([FieldError.invalid(field, value, "must be a list of strings")]),
            names.AUTHENTICATION_GROUP,
        )
    return tuple(value)


class AuthnReviews:
    """TokenReview and SelfSubjectReview: ours, plus the upstream SelfSubjectReview
    path kubectl hard-codes."""

    def __init__(self, server: "ServerContext"):
        self.server = server

    @staticmethod
    def handles(info: Any) -> bool:
        """True for the review endpoints: ours (also on the group's upstream alias), plus
        the older SelfSubjectReview versions kubectl hard-codes on the alias (served,
        but not listed in discovery)."""
        if not info.is_resource or info.resource not in REVIEW_RESOURCES or info.group != names.AUTHENTICATION_GROUP:
            return False
        if info.version == "v1" and info.kind is not None:  # registered and enabled
            return True
        return (
            info.alias is not None
            and info.resource == "selfsubjectreviews"
            and info.version in UPSTREAM_SELF_SUBJECT_REVIEW_VERSIONS
        )

    async def handle(self, request: Any, info: Any, user: UserInfo) -> Any:
        kind = REVIEW_RESOURCES[info.resource]
        if info.verb != "create" or info.name or info.subresource:
            raise st.method_not_allowed(f"{info.verb} is not supported on {info.resource}: reviews are create-only")
        if info.namespace:
            raise st.ApiError(404, "NotFound", "the server could not find the requested resource")
        handlers = self.server.handlers
        api_version = f"{info.requested_group}/{info.version}"  # the spelling the client used
        if kind == "SelfSubjectReview":
            # The review needs no input; kubectl sends protobuf, which is read and ignored.
            await handlers._read_body(request)
            out: dict[str, Any] = {
                "kind": kind,
                "apiVersion": api_version,
                "metadata": {"creationTimestamp": None},
                "status": {"userInfo": user_info_json(user)},
            }
        else:
            kind_info = info.kind
            obj = await handlers._decode_object(request, kind_info, expect_kind=kind)
            spec = obj.get("spec")
            if not isinstance(spec, dict):
                raise st.bad_request("spec: must be an object")
            token = spec.get("token")
            if not isinstance(token, str) or not token:
                raise st.bad_request("token is required for TokenReview")
            audiences = _str_list(spec.get("audiences"), "spec.audiences", kind)
            status: dict[str, Any] = {"authenticated": False, "user": {}}
            try:
                res = await self.server.authn.chain.review_token(token, audiences)
            except Unauthorized as exc:
                status["error"] = str(exc)
            else:
                status = {"authenticated": True, "user": user_info_json(res.user), "audiences": list(res.audiences)}
            md = dict(obj.get("metadata") or {})
            md.setdefault("creationTimestamp", None)
            out = {"kind": kind, "apiVersion": api_version, "metadata": md, "spec": spec, "status": status}
        accept = request.headers.get("Accept") or ""
        if "yaml" in accept and "json" not in accept:
            resp = web.Response(body=codec.dump_yaml(out), status=201, content_type="application/yaml")
        else:
            resp = web.Response(body=codec.dumps(out), status=201, content_type="application/json")
        return handlers._with_warnings(request, resp)  # the body's field-validation warnings
