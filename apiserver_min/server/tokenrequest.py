"""TokenRequest: ``POST serviceaccounts/<name>/token`` issues a bound token."""

from __future__ import annotations

import datetime as _dt
from typing import Any

from ..admission.chain import Attributes
from ..api import codec, names
from ..api import status as st
from ..api.kinds import KindInfo
from ..api.timeutil import format_rfc3339
from ..api.user import UserInfo
from ..api.validation import FieldError, causes
from ..authn.serviceaccount import TokenIssuer
from .handlers import WriteParams
from .negotiation import JSON
from .reviews import ProtobufError, decode_envelope, fields

# TokenRequest limits and defaults (upstream's).
DEFAULT_EXPIRATION_SECONDS = 3600
MIN_EXPIRATION_SECONDS = 600
MAX_EXPIRATION_SECONDS = 1 << 32


def _invalid(name: str, field: str, value: Any, detail: str) -> st.ApiError:
    return st.invalid(
        "TokenRequest", name, causes([FieldError.invalid(field, value, detail)]), names.AUTHENTICATION_GROUP
    )


def decode_token_request_protobuf(body: bytes) -> tuple[dict, str]:
    """A protobuf TokenRequest (``kubectl create token`` sends nothing else) as its JSON
    form. Field numbers are upstream's generated.proto: TokenRequest {metadata 1, spec 2},
    TokenRequestSpec {audiences 1, boundObjectRef 3, expirationSeconds 4},
    BoundObjectReference {kind 1, apiVersion 2, name 3, uid 4}. Returns the object and
    the envelope's apiVersion."""

    def text(v: Any) -> str:
        if not isinstance(v, bytes):
            raise ProtobufError("expected a length-delimited string")
        return v.decode("utf-8")

    try:
        api_version, kind, raw = decode_envelope(body)
        if kind not in ("", "TokenRequest"):
            raise st.bad_request(f"the kind in the data ({kind}) does not match the expected kind (TokenRequest)")
        obj: dict[str, Any] = {"metadata": {}, "spec": {}}
        for n, _w, v in fields(raw):
            if n == 1:
                obj["metadata"] = {
                    k: text(x) for num, _ww, x in fields(v) for k in ({1: "name", 3: "namespace"}.get(num),) if k
                }
            elif n == 2:
                spec = obj["spec"]
                for num, _ww, x in fields(v):
                    if num == 1:
                        spec.setdefault("audiences", []).append(text(x))
                    elif num == 4:
                        if not isinstance(x, int):
                            raise ProtobufError("expirationSeconds must be a varint")
                        spec["expirationSeconds"] = x
                    elif num == 3:
                        spec["boundObjectRef"] = {
                            k: text(y)
                            for m, _www, y in fields(x)
                            for k in ({1: "kind", 2: "apiVersion", 3: "name", 4: "uid"}.get(m),)
                            if k
                        }
        return obj, api_version
    except (ProtobufError, UnicodeDecodeError) as exc:
        raise st.bad_request(f"the protobuf body of the TokenRequest could not be decoded: {exc}") from None


class TokenRequests:
    """The ``serviceaccounts/token`` sub-resource (``authentication.orch.io/v1``)."""

    def __init__(
        self,
        server: Any,
        issuer: TokenIssuer | None,
        api_audiences: tuple[str, ...],
        max_expiration_seconds: float = 0.0,
    ):
        self.server = server
        self.issuer = issuer
        self.api_audiences = tuple(api_audiences)
        self.max_expiration_seconds = int(max_expiration_seconds)

    async def create(self, request: Any, info: Any, kind: "KindInfo", user: UserInfo) -> Any:

        if self.issuer is None:
            raise st.ApiError(
                404,
                "NotFound",
                "serviceaccounts/token is not available: this server has no "
                "service-account signing key (--service-account-signing-key-file)",
            )
        handlers = self.server.handlers
        store = self.server.store
        wp = WriteParams.parse(request)
        ns, name = info.namespace, info.name
        body, reply_api_version = await self._decode(request)
        md = body.get("metadata") or {}
        if md.get("name") not in (None, "") and md["name"] != name:
            raise st.bad_request(
                f"the name of the TokenRequest ({md['name']}) does not match the service "
                f"account name on the URL ({name})"
            )
        if md.get("namespace") not in (None, "") and md["namespace"] != ns:
            raise st.bad_request(
                "the namespace of the provided object does not match the namespace sent on the request"
            )
        spec = body.get("spec")
        if spec is None:
            spec = {}
        if not isinstance(spec, dict):
            raise _invalid(name, "spec", spec, "must be an object")
        audiences = spec.get("audiences")
        if audiences in (None, []):
            audiences = list(self.api_audiences)
        if not isinstance(audiences, list) or not all(isinstance(a, str) and a for a in audiences):
            raise _invalid(name, "spec.audiences", audiences, "must be a list of non-empty strings")
        seconds = spec.get("expirationSeconds")
        if seconds is None:
            seconds = DEFAULT_EXPIRATION_SECONDS
        if isinstance(seconds, bool) or not isinstance(seconds, int):
            raise _invalid(name, "spec.expirationSeconds", seconds, "must be an integer")
        if seconds < MIN_EXPIRATION_SECONDS:
            raise _invalid(name, "spec.expirationSeconds", seconds, "may not specify a duration less than 10 minutes")
        if seconds > MAX_EXPIRATION_SECONDS:
            raise _invalid(
                name, "spec.expirationSeconds", seconds, "may not specify a duration larger than 2^32 seconds"
            )
        sa = await store.get_object(kind, ns, name)
        sa_uid = (sa.get("metadata") or {}).get("uid", "")
        pod, secret = await self._bound_object(spec.get("boundObjectRef"), ns, name)
        # Admission sees the request as a create of serviceaccounts/token (NodeRestriction
        # lets a node ask only for tokens bound to its own pods).
        await store.admission.run(Attributes("CREATE", kind, ns, name, "token", body, None, user, wp.dry_run))
        if self.max_expiration_seconds and seconds > self.max_expiration_seconds:
            seconds = self.max_expiration_seconds
        out_spec: dict[str, Any] = {"audiences": audiences, "expirationSeconds": seconds}
        if spec.get("boundObjectRef") is not None:
            out_spec["boundObjectRef"] = spec["boundObjectRef"]
        now = self.issuer.clock()
        out: dict[str, Any] = {
            "kind": "TokenRequest",
            "apiVersion": reply_api_version,
            "metadata": {
                "name": name,
                "namespace": ns,
                "creationTimestamp": format_rfc3339(_dt.datetime.fromtimestamp(int(now), _dt.timezone.utc)),
            },
            "spec": out_spec,
        }
        if not wp.dry_run:
            token, exp = self.issuer.issue(ns, name, sa_uid, audiences, seconds, pod, secret)
            out["status"] = {
                "token": token,
                "expirationTimestamp": format_rfc3339(_dt.datetime.fromtimestamp(exp, _dt.timezone.utc)),
            }
        return handlers._respond_obj(request, out, 201, JSON if wp.target.form == "table" else wp.target)

    async def _decode(self, request: Any) -> tuple[dict, str]:
        """The TokenRequest body (JSON, YAML or protobuf) and the apiVersion to answer
        in: ours, or upstream's spelling when the client wrote that (kubectl decodes
        the reply only in the group it sent)."""

        ours, upstream = f"{names.AUTHENTICATION_GROUP}/v1", f"{names.UPSTREAM_AUTHENTICATION_GROUP}/v1"
        ctype = (request.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        raw = await self.server.handlers._read_body(request)
        if ctype in (names.MEDIA_PROTOBUF, names.MEDIA_PROTOBUF_UPSTREAM):
            obj, api_version = decode_token_request_protobuf(raw)
        elif ctype in ("", "application/json", "application/yaml", "application/x-yaml", "text/yaml"):
            obj = codec.decode_body(
                raw, "application/json" if ctype in ("", "application/json") else "application/yaml"
            )
            if not isinstance(obj, dict):
                raise st.bad_request("the request body must be a TokenRequest object")
            if obj.get("kind") not in (None, "", "TokenRequest"):
                raise st.bad_request(
                    f"the kind in the data ({obj.get('kind')}) does not match the expected kind (TokenRequest)"
                )
            api_version = obj.get("apiVersion") or ""
        else:
            raise st.unsupported_media_type(
                f"the body of the request was in an unknown format ({ctype}) - accepted media types include: "
                f"application/json, application/yaml, {names.MEDIA_PROTOBUF}"
            )
        if api_version not in ("", ours, upstream):
            raise st.bad_request(
                f"the API version in the data ({api_version}) does not match the expected API version ({ours})"
            )
        if obj.get("metadata") is not None and not isinstance(obj.get("metadata"), dict):
            raise st.bad_request("metadata: must be an object")
        return obj, api_version or ours

    async def _bound_object(
        self, ref: Any, ns: str, sa_name: str
    ) -> tuple[tuple[str, str] | None, tuple[str, str] | None]:
        if ref is None:
            return None, None
        if not isinstance(ref, dict):
            raise _invalid(sa_name, "spec.boundObjectRef", ref, "must be an object")
        kind, api_version, ref_name, ref_uid = (
            ref.get("kind"),
            ref.get("apiVersion") or "",
            ref.get("name"),
            ref.get("uid") or "",
        )
        if kind not in ("Pod", "Secret") or api_version != "v1":
            raise st.bad_request(f"cannot bind token to object of type {api_version}, Kind={kind}")
        if not isinstance(ref_name, str) or not ref_name:
            raise _invalid(sa_name, "spec.boundObjectRef.name", ref_name, "the bound object must be named")
        registry = self.server.registry
        obj = await self.server.store.get_object(
            registry.by_resource("", "v1", "pods" if kind == "Pod" else "secrets"), ns, ref_name
        )
        uid = (obj.get("metadata") or {}).get("uid", "")
        if kind == "Pod" and (obj.get("spec") or {}).get("serviceAccountName") != sa_name:
            raise st.bad_request(
                f'cannot bind token for serviceaccount "{sa_name}" to pod running with different serviceaccount name.'
            )
        if ref_uid and ref_uid != uid:
            raise st.conflict(
                kind,
                ref_name,
                "",
                f"the UID in the bound object reference ({ref_uid}) does not match "
                "the UID in record. The object might have been deleted and then "
                "recreated",
            )
        return ((ref_name, uid), None) if kind == "Pod" else (None, (ref_name, uid))
