"""A small HTTPS admission webhook for tests and benchmarks: an aiohttp server on
127.0.0.1 in a thread of its own, with a certificate from a CA the test makes.

Each path answers one way (``/allow``, ``/deny``, ``/patch``, ``/label``, ``/warn``,
``/hang``, ``/garbage``); an ImageReview (any path) is answered as an image policy backend
allowing images under ``good/``; a ConversionReview as a conversion webhook
(:func:`conversion_answer`); a SubjectAccessReview as an authorization backend
(:func:`access_review_answer`). Every review received is kept in ``reviews``
(path, review)."""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import sys
import tempfile
import threading
from pathlib import Path

from aiohttp import web
from cryptography.hazmat.primitives.asymmetric import ec

from apiserver_min import pki
from tests.components import free_port

DENY_MESSAGE = "no thanks"
WARNING = "careful: this object is watched"


def image_review_answer(review: dict) -> dict:
    """The image policy backend: images under ``good/`` only."""
    bad = [c["image"] for c in review["spec"].get("containers") or [] if not c["image"].startswith("good/")]
    status: dict = {"allowed": not bad, "auditAnnotations": {"checked": str(len(review["spec"]["containers"]))}}
    if bad:
        status["reason"] = f"image {bad[0]} is not allowed"
    return {"apiVersion": review["apiVersion"], "kind": "ImageReview", "status": status}


# The authorization backend's users: one allowed, one denied (with a reason); the
# others get no opinion.
SAR_ALLOWED_USER = "wh-alice"
SAR_DENIED_USER = "wh-mallory"
SAR_DENY_REASON = "mallory is banned from this cluster"
SAR_BROKEN_USER = "wh-broken"  # the backend answers HTTP 400 for this one


def access_review_answer(review: dict) -> dict:
    user = (review.get("spec") or {}).get("user")
    status: dict = {"allowed": False}
    if user == SAR_ALLOWED_USER:
        status = {"allowed": True, "reason": "alice may"}
    elif user == SAR_DENIED_USER:
        status = {"allowed": False, "denied": True, "reason": SAR_DENY_REASON}
    return {"apiVersion": review.get("apiVersion"), "kind": "SubjectAccessReview", "status": status}


CONVERT_FAILURE = "the converter is out of order"


def convert_endpoint(obj: dict, desired: str) -> dict:
    """An Endpoint object between its two versions: v1 has ``spec.host`` and
    ``spec.port``, v2 ``spec.hostPort`` ("host:port"). Other fields are kept; the
    webhook adds the label ``converted-to``."""
    out = json.loads(json.dumps(obj))
    spec = out.setdefault("spec", {})
    if desired.endswith("/v2") and ("host" in spec or "port" in spec):
        spec["hostPort"] = f"{spec.pop('host', '')}:{spec.pop('port', '')}"
    elif desired.endswith("/v1") and "hostPort" in spec:
        host, _, port = spec.pop("hostPort").rpartition(":")
        spec["host"] = host
        if port:
            spec["port"] = int(port)
    out["apiVersion"] = desired
    out.setdefault("metadata", {}).setdefault("labels", {})["converted-to"] = desired.rpartition("/")[2]
    return out


def conversion_answer(path: str, review: dict) -> dict:
    """``/convert``: converts (:func:`convert_endpoint`); ``/convert-fail``: answers a
    Failure; ``/convert-short``: drops the last object; ``/convert-rename``: changes
    the objects' names (not allowed); ``/convert-meta``: changes annotations (allowed)
    and the generation (given back); ``/convert-kind``, ``/convert-version``: a wrong
    kind or apiVersion; ``/convert-uid``: a wrong response uid."""
    req = review.get("request") or {}
    desired = req.get("desiredAPIVersion", "")
    objs = [convert_endpoint(o, desired) for o in req.get("objects") or []]
    result: dict = {"status": "Success"}
    if path == "/convert-fail":
        objs, result = [], {"status": "Failure", "message": CONVERT_FAILURE}
    elif path == "/convert-short":
        objs = objs[:-1]
    elif path == "/convert-rename":
        for o in objs:
            o["metadata"]["name"] = "renamed"
    elif path == "/convert-meta":
        for o in objs:
            o["metadata"]["annotations"] = {"converted": "yes"}
            o["metadata"]["generation"] = 99
    elif path == "/convert-kind":
        for o in objs:
            o["kind"] = "Other"
    elif path == "/convert-version":
        for o in objs:
            o["apiVersion"] = "other.example.com/v1"
    uid = "not-yours" if path == "/convert-uid" else req.get("uid")
    response = {"uid": uid, "result": result, "convertedObjects": objs}
    return {"apiVersion": review.get("apiVersion"), "kind": "ConversionReview", "response": response}


class WebhookServer:
    def __init__(self, client_ca_pem: bytes | None = None, dns: tuple[str, ...] = ()):
        self.port = free_port()
        self.reviews: list[tuple[str, dict]] = []
        self.client_certs: list[dict | None] = []
        self.authorizations: list[str] = []
        self.timeouts: list[tuple[str, str]] = []  # (path, its ?timeout=) per review received
        ca_cert, ca_key = pki.make_ca("webhook-test-ca")
        key = ec.generate_private_key(ec.SECP256R1())
        cert = pki.sign_leaf(
            ca_cert, ca_key, key.public_key(), "webhook", server=True, ips=["127.0.0.1"], dns=["localhost", *dns]
        )
        self.ca_pem = pki.cert_pem(ca_cert)
        self._dir = tempfile.TemporaryDirectory(prefix="orch-webhook-test-")
        d = Path(self._dir.name)
        (d / "tls.crt").write_bytes(pki.cert_pem(cert))
        (d / "tls.key").write_bytes(pki.key_pem(key))
        self._ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._ctx.load_cert_chain(str(d / "tls.crt"), str(d / "tls.key"))
        if client_ca_pem:
            self._ctx.load_verify_locations(cadata=client_ca_pem.decode())
            self._ctx.verify_mode = ssl.CERT_OPTIONAL
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self.hang_seconds = 5.0
        self.keep_reviews = True
        self.calls = 0

    @property
    def ca_bundle(self) -> str:
        return base64.b64encode(self.ca_pem).decode()

    def url(self, path: str) -> str:
        return f"https://127.0.0.1:{self.port}{path}"

    def client_config(self, path: str) -> dict:
        return {"url": self.url(path), "caBundle": self.ca_bundle}

    def reviews_for(self, path: str) -> list[dict]:
        return [r for p, r in list(self.reviews) if p == path]

    async def _handle(self, request: web.Request) -> web.Response:
        review = await request.json()
        path = request.path
        self.calls += 1
        if self.keep_reviews:
            self.reviews.append((path, review))
            peer = request.transport.get_extra_info("peercert") if request.transport else None
            self.client_certs.append(peer)
            self.authorizations.append(request.headers.get("Authorization", ""))
            self.timeouts.append((path, request.query.get("timeout", "")))
        if review.get("kind") == "SubjectAccessReview":
            if (review.get("spec") or {}).get("user") == SAR_BROKEN_USER:
                return web.Response(status=400, text="cannot review this")
            return web.json_response(access_review_answer(review))
        if review.get("kind") == "ImageReview":
            return web.json_response(image_review_answer(review))
        if review.get("kind") == "ConversionReview":
            if path == "/convert-hang":
                await asyncio.sleep(self.hang_seconds)
            return web.json_response(conversion_answer(path, review))
        req = review.get("request") or {}
        response: dict = {"uid": req.get("uid"), "allowed": True}
        if path == "/deny":
            response = {"uid": req.get("uid"), "allowed": False, "status": {"code": 403, "message": DENY_MESSAGE}}
        elif path == "/patch":
            labels = ((req.get("object") or {}).get("metadata") or {}).get("labels")
            ops = [] if labels is not None else [{"op": "add", "path": "/metadata/labels", "value": {}}]
            ops += [
                {"op": "add", "path": "/metadata/labels/patched", "value": "yes"},
                {"op": "add", "path": "/data/added-by-webhook", "value": "1"},
            ]
            response["patchType"] = "JSONPatch"
            response["patch"] = base64.b64encode(json.dumps(ops).encode()).decode()
            response["auditAnnotations"] = {"seen": "true"}
        elif path == "/label":  # labels the object with the version it was sent in
            obj = req.get("object") or {}
            ops = (
                []
                if (obj.get("metadata") or {}).get("labels") is not None
                else [{"op": "add", "path": "/metadata/labels", "value": {}}]
            )
            version = str(obj.get("apiVersion") or "").rpartition("/")[2]
            ops.append({"op": "add", "path": "/metadata/labels/seen-version", "value": version})
            response["patchType"] = "JSONPatch"
            response["patch"] = base64.b64encode(json.dumps(ops).encode()).decode()
        elif path == "/warn":
            response["warnings"] = [WARNING]
        elif path == "/hang":
            await asyncio.sleep(self.hang_seconds)
        elif path == "/garbage":
            return web.Response(text="not json", content_type="text/plain")
        return web.json_response(
            {"apiVersion": review.get("apiVersion"), "kind": "AdmissionReview", "response": response}
        )

    def start(self) -> "WebhookServer":
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            app = web.Application()
            app.router.add_post("/{tail:.*}", self._handle)
            self._runner = web.AppRunner(app, access_log=None)
            loop.run_until_complete(self._runner.setup())
            site = web.TCPSite(self._runner, "127.0.0.1", self.port, ssl_context=self._ctx)
            loop.run_until_complete(site.start())
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self._runner.cleanup())
            loop.close()

        self._thread = threading.Thread(target=run, name="test-webhook", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("the test webhook server did not start")
        return self

    def stop(self) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(10)
        self._dir.cleanup()

    def __enter__(self) -> "WebhookServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def main() -> None:
    """Run the webhook in a process of its own (benchmarks): prints its port and CA
    bundle as one JSON line, then serves until its standard input closes."""
    with WebhookServer() as w:
        w.keep_reviews = False
        print(json.dumps({"port": w.port, "caBundle": w.ca_bundle}), flush=True)
        sys.stdin.read()


if __name__ == "__main__":
    main()
