"""The reviews: access reviews (``authorization.orch.io/v1``) ask the authorizer a question;
TokenReview and SelfSubjectReview (``authentication.orch.io/v1``) ask the authenticator.

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

from typing import Any, Callable

from ..api import names
from ..api import status as st
from ..api.user import UserInfo
from ..api.validation import FieldError, causes
from ..authn.authenticator import Unauthorized
from ..authz.authorizer import AuthzAttributes, Decision, Union
from ..registry.rest import BodyIgnored, RequestContext, RestTable

REVIEW_KINDS = {
    "subjectaccessreviews": "SubjectAccessReview",
    "selfsubjectaccessreviews": "SelfSubjectAccessReview",
    "localsubjectaccessreviews": "LocalSubjectAccessReview",
    "selfsubjectrulesreviews": "SelfSubjectRulesReview",
}


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

        def g(k: str) -> str:
            return str(ra.get(k) or "")

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


async def access_status(authorizer: Union, attrs: AuthzAttributes) -> dict:
    """Every authorizer's answer (the webhook's too); a failure is ``evaluationError``."""
    decision, reason, error = await authorizer.decide(attrs)
    status: dict[str, Any] = {"allowed": decision is Decision.ALLOW}
    if decision is Decision.DENY:
        status["denied"] = True
    if reason:
        status["reason"] = reason
    if error:
        status["evaluationError"] = error
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


class AccessReviewREST:
    """SubjectAccessReview, LocalSubjectAccessReview, SelfSubjectAccessReview and
    SelfSubjectRulesReview: create-only, never stored; the answer is the status."""

    def __init__(self, kind: str, authorizer: Callable[[], Union]):
        self.kind = kind
        self._authorizer = authorizer

    async def create(self, ctx: RequestContext, obj: dict) -> tuple[int, dict]:
        kind = self.kind
        spec = obj.get("spec")
        authorizer = self._authorizer()
        if kind == "SelfSubjectRulesReview":
            if not isinstance(spec, dict):
                raise _invalid(kind, "spec", spec, "must be an object")
            namespace = spec.get("namespace") or ""
            if not isinstance(namespace, str) or not namespace:
                raise st.bad_request("no namespace on request")
            status = rules_status(authorizer, ctx.user, namespace)
        else:
            validate_access_spec(kind, spec)
            assert isinstance(spec, dict)
            if kind == "LocalSubjectAccessReview":
                md_ns = (obj.get("metadata") or {}).get("namespace")
                if md_ns not in (None, "") and md_ns != ctx.namespace:
                    raise st.bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request"
                    )
                if (spec["resourceAttributes"].get("namespace") or "") != ctx.namespace:
                    raise st.bad_request(f"spec.resourceAttributes.namespace must match namespace: {ctx.namespace}")
            subject = ctx.user if kind == "SelfSubjectAccessReview" else _subject_user(spec)
            status = await access_status(authorizer, spec_attributes(subject, spec))
        md = dict(obj.get("metadata") or {})
        md.setdefault("creationTimestamp", None)
        if kind == "LocalSubjectAccessReview":
            md["namespace"] = ctx.namespace
        out = {"kind": kind, "apiVersion": f"{names.AUTHORIZATION_GROUP}/v1", "metadata": md, "spec": spec}
        out["status"] = status
        return 201, out


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


class TokenReviewREST:
    """TokenReview: who a bearer token belongs to, by the authenticator chain."""

    def __init__(self, authn: Any):
        self.authn = authn  # authn.union.Authentication

    async def create(self, ctx: RequestContext, obj: dict) -> tuple[int, dict]:
        kind = "TokenReview"
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            raise st.bad_request("spec: must be an object")
        token = spec.get("token")
        if not isinstance(token, str) or not token:
            raise st.bad_request("token is required for TokenReview")
        audiences = _str_list(spec.get("audiences"), "spec.audiences", kind)
        status: dict[str, Any] = {"authenticated": False, "user": {}}
        try:
            res = await self.authn.chain.review_token(token, audiences)
        except Unauthorized as exc:
            status["error"] = str(exc)
        else:
            status = {"authenticated": True, "user": user_info_json(res.user), "audiences": list(res.audiences)}
        md = dict(obj.get("metadata") or {})
        md.setdefault("creationTimestamp", None)
        out = {"kind": kind, "apiVersion": f"{names.AUTHENTICATION_GROUP}/v1", "metadata": md, "spec": spec}
        out["status"] = status
        return 201, out


class SelfSubjectReviewREST(BodyIgnored):
    """SelfSubjectReview: who the caller is. It needs no input; kubectl sends a
    protobuf body, which is read and ignored. Served in every version kubectl asks
    for on the upstream spelling (``UPSTREAM_SELF_SUBJECT_REVIEW_VERSIONS``)."""

    async def create(self, ctx: RequestContext, obj: dict) -> tuple[int, dict]:
        return 201, {
            "kind": "SelfSubjectReview",
            "apiVersion": f"{names.AUTHENTICATION_GROUP}/{ctx.version or 'v1'}",
            "metadata": {"creationTimestamp": None},
            "status": {"userInfo": user_info_json(ctx.user)},
        }


def review_protobuf_decoders() -> dict[str, Callable[[bytes], dict]]:
    """Protobuf body decoders of the authorization reviews, by kind: the envelope
    and the review message (``kubectl auth can-i`` sends nothing else)."""

    def decoder(kind: str) -> Callable[[bytes], dict]:
        def decode(body: bytes) -> dict:
            try:
                api_version, got_kind, raw = decode_envelope(body)
                obj = decode_review(kind, raw)
            except ProtobufError as exc:
                raise st.bad_request(f"the protobuf body of the {kind} could not be decoded: {exc}") from None
            obj["apiVersion"], obj["kind"] = api_version, got_kind
            return obj

        return decode

    return {kind: decoder(kind) for kind in REVIEW_KINDS.values()}


def install(table: RestTable, authorizer: Callable[[], Union], authn: Any) -> None:
    """The reviews as their kinds' collection REST objects (the older
    SelfSubjectReview versions only on the upstream spelling of the group)."""
    for resource, kind in REVIEW_KINDS.items():
        table.add_collection(names.AUTHORIZATION_GROUP, resource, AccessReviewREST(kind, authorizer))
    table.add_collection(names.AUTHENTICATION_GROUP, "tokenreviews", TokenReviewREST(authn))
    ssr = SelfSubjectReviewREST()
    table.add_collection(names.AUTHENTICATION_GROUP, "selfsubjectreviews", ssr)
    for version in UPSTREAM_SELF_SUBJECT_REVIEW_VERSIONS:
        if version != "v1":
            table.add_unregistered(names.AUTHENTICATION_GROUP, version, "selfsubjectreviews", ssr)
