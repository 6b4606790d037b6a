"""An HTTPS identity provider for tests and benchmarks, on 127.0.0.1 in a thread of its
own with a certificate from a CA the test makes:

- an OpenID Connect issuer: ``/.well-known/openid-configuration`` and ``/keys`` (the
  key set), and ``mint()`` to sign ID tokens with its keys (RS256, ES256, PS256);
- a token review backend: POST ``/tokenreview`` answers a TokenReview from
  ``webhook_users`` (token -> user) and keeps every review in ``reviews``.

``requests`` counts the GETs of each path, so tests can check the API server does
not ask the issuer per request."""

from __future__ import annotations

import asyncio
import base64
import collections
import json
import ssl
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import jwt
from aiohttp import web
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from apiserver_min import pki
from tests.components import free_port


class IdentityProvider:
    def __init__(self) -> None:
        self.port = free_port()
        self.issuer = f"https://127.0.0.1:{self.port}"
        ca_cert, ca_key = pki.make_ca("identity-provider-test-ca")
        key = ec.generate_private_key(ec.SECP256R1())
        cert = pki.sign_leaf(ca_cert, ca_key, key.public_key(), "idp", server=True, ips=["127.0.0.1"])
        self.ca_pem = pki.cert_pem(ca_cert)
        self._dir = tempfile.TemporaryDirectory(prefix="orch-idp-test-")
        d = Path(self._dir.name)
        (d / "tls.crt").write_bytes(pki.cert_pem(cert))
        (d / "tls.key").write_bytes(pki.key_pem(key))
        (d / "ca.crt").write_bytes(self.ca_pem)
        self.ca_file = str(d / "ca.crt")
        self._ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._ctx.load_cert_chain(str(d / "tls.crt"), str(d / "tls.key"))
        # kid -> (private key, algorithm); the published set is the public halves of `published`.
        self.keys: dict[str, tuple[Any, str]] = {
            "rsa-1": (rsa.generate_private_key(public_exponent=65537, key_size=2048), "RS256"),
            "ec-1": (ec.generate_private_key(ec.SECP256R1()), "ES256"),
        }
        self.published = ["rsa-1", "ec-1"]
        self.requests: collections.Counter[str] = collections.Counter()
        self.webhook_users: dict[str, dict] = {}
        self.reviews: list[dict] = []
        self.webhook_fail = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    # --- tokens -------------------------------------------------------------------------
    def add_key(self, kid: str, alg: str = "RS256", publish: bool = True) -> None:
        key = ec.generate_private_key(ec.SECP256R1()) if alg.startswith("ES") else rsa.generate_private_key(65537, 2048)
        self.keys[kid] = (key, alg)
        if publish:
            self.published.append(kid)

    def claims(self, sub: str = "jane", aud: str | list[str] = "orch", **extra: Any) -> dict:
        now = int(time.time())
        out: dict[str, Any] = {"iss": self.issuer, "sub": sub, "aud": aud, "iat": now, "exp": now + 600}
        out.update(extra)
        return {k: v for k, v in out.items() if v is not None}

    def mint(self, claims: dict, kid: str = "rsa-1", alg: str | None = None) -> str:
        key, key_alg = self.keys[kid]
        return jwt.encode(claims, key, algorithm=alg or key_alg, headers={"kid": kid})

    def jwks(self) -> dict:
        out = []
        for kid in self.published:
            key, alg = self.keys[kid]
            algo = jwt.get_algorithm_by_name(alg)
            jwk = json.loads(algo.to_jwk(key.public_key()))
            jwk.update({"kid": kid, "use": "sig", "alg": alg})
            out.append(jwk)
        return {"keys": out}

    # --- HTTP ---------------------------------------------------------------------------
    async def _discovery(self, request: web.Request) -> web.Response:
        self.requests[request.path] += 1
        return web.json_response(
            {
                "issuer": self.issuer,
                "jwks_uri": f"{self.issuer}/keys",
                "authorization_endpoint": f"{self.issuer}/auth",
                "response_types_supported": ["id_token"],
                "subject_types_supported": ["public"],
                "id_token_signing_alg_values_supported": ["RS256", "ES256", "PS256"],
            }
        )

    async def _keys(self, request: web.Request) -> web.Response:
        self.requests[request.path] += 1
        return web.json_response(self.jwks())

    async def _tokenreview(self, request: web.Request) -> web.Response:
        review = await request.json()
        self.reviews.append(review)
        if self.webhook_fail:
            return web.Response(status=500, text="backend broken")
        user = self.webhook_users.get(review["spec"]["token"])
        status: dict[str, Any] = {"authenticated": user is not None}
        if user is not None:
            status["user"] = user
            if "audiences" in user:
                status["audiences"] = user.pop("audiences")
        else:
            status["error"] = "unknown token"
        return web.json_response({"apiVersion": review["apiVersion"], "kind": "TokenReview", "status": status})

    def start(self) -> "IdentityProvider":
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            app = web.Application()
            app.router.add_get("/.well-known/openid-configuration", self._discovery)
            app.router.add_get("/keys", self._keys)
            app.router.add_post("/tokenreview", self._tokenreview)
            runner = web.AppRunner(app, access_log=None)
            loop.run_until_complete(runner.setup())
            loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", self.port, ssl_context=self._ctx).start())
            ready.set()
            loop.run_forever()
            loop.run_until_complete(runner.cleanup())
            loop.close()

        self._thread = threading.Thread(target=run, name="test-identity-provider", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("the test identity provider did not start")
        return self

    def stop(self) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(10)
        self._dir.cleanup()

    def __enter__(self) -> "IdentityProvider":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def webhook_orchconfig(self, path: Path) -> Path:
        """An orchconfig naming this provider's token review backend."""
        doc = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "reviewer",
                    "cluster": {
                        "server": f"{self.issuer}/tokenreview",
                        "certificate-authority-data": base64.b64encode(self.ca_pem).decode(),
                    },
                }
            ],
            "users": [{"name": "apiserver", "user": {"token": "apiserver-secret"}}],
            "contexts": [{"name": "webhook", "context": {"cluster": "reviewer", "user": "apiserver"}}],
            "current-context": "webhook",
        }
        path.write_text(json.dumps(doc))
        return path
