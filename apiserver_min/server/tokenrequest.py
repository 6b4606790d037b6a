"""TokenRequest bodies in protobuf (``kubectl create token`` sends nothing else).

The ``serviceaccounts/token`` sub-resource itself is a REST object of the core
family (``registry.core.ServiceAccountTokenREST``); the HTTP layer decodes its
protobuf body with :func:`decode_token_request`.
"""

from __future__ import annotations

from typing import Any

from ..api import status as st
from .reviews import ProtobufError, decode_envelope, fields


def decode_token_request_protobuf(body: bytes) -> tuple[dict, str]:
    """A protobuf TokenRequest as its JSON form. Field numbers are upstream's
    generated.proto: TokenRequest {metadata 1, spec 2}, TokenRequestSpec {audiences 1,
    boundObjectRef 3, expirationSeconds 4}, BoundObjectReference {kind 1, apiVersion 2,
    name 3, uid 4}. Returns the object and the envelope's apiVersion."""

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


def decode_token_request(body: bytes) -> dict:
    """:func:`decode_token_request_protobuf` with the envelope's apiVersion and kind
    in the object, as the HTTP layer's decoders return it."""
    obj, api_version = decode_token_request_protobuf(body)
    obj["apiVersion"], obj["kind"] = api_version, "TokenRequest"
    return obj
