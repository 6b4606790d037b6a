"""Bootstrap tokens, their secrets, the detached JWS of cluster-info and CA pinning
(apiserver_min/api/bootstraptoken.py)."""

from __future__ import annotations

import base64
import datetime as _dt
import hashlib
import hmac
import json

import pytest
import yaml
from cryptography.hazmat.primitives import serialization

from apiserver_min.api import bootstraptoken as bt
from apiserver_min.api import names
from apiserver_min.pki import cert_pem, make_ca

UTC = _dt.timezone.utc
TOKEN = "abcdef.0123456789abcdef"


def test_generate_and_parse_tokens():
    seen = set()
    for _ in range(50):
        tok = bt.generate_token()
        assert bt.TOKEN_RE.match(str(tok)), tok
        assert bt.parse_token(str(tok)) == tok
        seen.add(str(tok))
    assert len(seen) == 50
    assert bt.parse_token(TOKEN) == bt.Token("abcdef", "0123456789abcdef")
    assert bt.parse_token(TOKEN).secret_name == "bootstrap-token-abcdef"
    for bad in (
        "abcdef0123456789abcdef",
        "ABCDEF.0123456789abcdef",
        "abcde.0123456789abcdef",
        "abcdef.0123456789abcde",
        "abcdef.0123456789abcdef0",
        "",
        "abcdef.0123456789abcde_",
    ):
        with pytest.raises(bt.TokenError, match="does not match the format"):
            bt.parse_token(bad)
    assert bt.parse_token_id("abcdef") == "abcdef"
    assert bt.parse_token_id(TOKEN) == "abcdef"
    with pytest.raises(bt.TokenError):
        bt.parse_token_id("abc")


def test_usages_and_groups():
    assert bt.parse_usages(["signing,authentication"]) == ("signing", "authentication")
    assert bt.parse_usages(["signing", "signing"]) == ("signing",)
    with pytest.raises(bt.TokenError, match="'auth'"):
        bt.parse_usages(["auth"])
    assert bt.parse_groups(["system:bootstrappers:a,system:bootstrappers:b-c"]) == (
        "system:bootstrappers:a",
        "system:bootstrappers:b-c",
    )
    for bad in ("system:nodes", "system:bootstrappers:", "system:bootstrappers:x-", "devs"):
        with pytest.raises(bt.TokenError, match="must start with system:bootstrappers:"):
            bt.parse_groups([bad])


def test_secret_round_trip():
    now = _dt.datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
    tok = bt.parse_token(TOKEN)
    secret = bt.secret_for_token(
        tok,
        ttl=_dt.timedelta(hours=24),
        now=now,
        usages=["authentication"],
        groups=["system:bootstrappers:workers"],
        description="for node n1",
    )
    assert secret["metadata"] == {"name": "bootstrap-token-abcdef", "namespace": names.NS_SYSTEM}
    assert secret["type"] == names.BOOTSTRAP_TOKEN_SECRET_TYPE
    plain = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    assert plain == {
        "token-id": "abcdef",
        "token-secret": "0123456789abcdef",
        "expiration": "2030-01-03T03:04:05Z",
        "usage-bootstrap-authentication": "true",
        "auth-extra-groups": "system:bootstrappers:workers",
        "description": "for node n1",
    }
    ts = bt.token_from_secret(secret)
    assert ts.token == tok and ts.usages == ("authentication",) and ts.groups == ("system:bootstrappers:workers",)
    assert ts.expiration == now + _dt.timedelta(hours=24) and ts.description == "for node n1"
    assert not ts.expired(now) and ts.expired(now + _dt.timedelta(hours=24))
    assert not ts.for_signing(now)  # not marked for signing
    # stringData works too and wins over data; ttl 0 means no expiration.
    forever = bt.secret_for_token(tok, ttl=_dt.timedelta(0))
    assert "expiration" not in forever["data"]
    forever["stringData"] = {"usage-bootstrap-signing": "true"}
    assert bt.token_from_secret(forever).for_signing(now + _dt.timedelta(days=10000))


def test_bad_secrets_are_named():
    tok = bt.parse_token(TOKEN)
    s = bt.secret_for_token(tok)
    s["metadata"]["name"] = "bootstrap-token-zzzzzz"
    with pytest.raises(bt.TokenError, match="not 'zzzzzz' as the name says"):
        bt.token_from_secret(s)
    s = bt.secret_for_token(tok)
    s["type"] = "Opaque"
    with pytest.raises(bt.TokenError, match="type 'Opaque'"):
        bt.token_from_secret(s)
    s = bt.secret_for_token(tok)
    s["stringData"] = {"expiration": "tomorrow"}
    with pytest.raises(bt.TokenError, match="not an RFC 3339 time"):
        bt.token_from_secret(s)


def _spec_verify(signature: str, content: str, token: str) -> bool:
    """The seed's verification procedure, written out independently."""
    header, empty, sig = signature.split(".")
    assert empty == ""
    payload = base64.urlsafe_b64encode(content.encode()).rstrip(b"=").decode()
    hdr = json.loads(base64.urlsafe_b64decode(header + "=" * (-len(header) % 4)))
    if hdr.get("alg") != "HS256":
        return False
    mac = hmac.new(token.encode(), f"{header}.{payload}".encode(), hashlib.sha256).digest()
    return hmac.compare_digest(base64.urlsafe_b64encode(mac).rstrip(b"=").decode(), sig)


def test_detached_jws_sign_and_verify():
    content = "apiVersion: v1\nkind: Config\n"
    sig = bt.sign_detached(content, TOKEN)
    header, empty, _ = sig.split(".")
    assert empty == "" and "=" not in sig
    assert base64.urlsafe_b64decode(header + "==") == b'{"alg":"HS256","kid":"abcdef"}'
    assert _spec_verify(sig, content, TOKEN)
    # A fixed vector: the same inputs always give the same signature.
    assert sig == bt.sign_detached(content, bt.parse_token(TOKEN))
    bt.verify_detached(sig, content, TOKEN)
    with pytest.raises(bt.JwsError, match="does not match"):
        bt.verify_detached(sig, content, "abcdef.0123456789abcdee")
    with pytest.raises(bt.JwsError, match="does not match"):
        bt.verify_detached(sig, content + " ", TOKEN)
    with pytest.raises(bt.JwsError, match="key id"):
        bt.verify_detached(sig, content, "zzzzzz.0123456789abcdef")
    with pytest.raises(bt.JwsError, match="detached"):
        bt.verify_detached(sig.replace("..", ".eA."), content, TOKEN)
    # Another algorithm is refused even with a correct MAC.
    none_header = bt.b64url(b'{"alg":"none","kid":"abcdef"}')
    forged = none_header + ".." + sig.split(".")[2]
    with pytest.raises(bt.JwsError, match="only HS256"):
        bt.verify_detached(forged, content, TOKEN)


def test_ca_hash_and_cluster_info_kubeconfig():
    cert, _ = make_ca()
    spki = cert.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    want = "sha256:" + hashlib.sha256(spki).hexdigest()
    assert bt.ca_cert_hash(cert) == want == bt.ca_cert_hash(cert_pem(cert))
    assert bt.ca_matches(cert, [want.upper().replace("SHA256:", "sha256:")])
    assert not bt.ca_matches(cert, ["sha256:" + "0" * 64])
    with pytest.raises(bt.TokenError, match="sha256:<64 hex digits>"):
        bt.parse_ca_hash("md5:abc")
    content = bt.cluster_info_kubeconfig("https://10.0.0.1:6443", cert_pem(cert))
    assert content == bt.cluster_info_kubeconfig("https://10.0.0.1:6443", cert_pem(cert))
    doc = yaml.safe_load(content)
    assert doc["kind"] == "Config" and doc["clusters"][0]["cluster"]["server"] == "https://10.0.0.1:6443"
    assert bt.kubeconfig_cluster(content) == ("https://10.0.0.1:6443", cert_pem(cert))
    with pytest.raises(bt.TokenError, match="no cluster"):
        bt.kubeconfig_cluster("kind: Config\n")
    assert bt.join_command("https://10.0.0.1:6443", TOKEN, want) == (
        f"orch-agent join --server https://10.0.0.1:6443 --token {TOKEN} --discovery-token-ca-cert-hash {want}"
    )
