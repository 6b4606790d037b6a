"""CustomResourceDefinitions converting with a webhook (``spec.conversion.strategy:
Webhook``), against the real server, kubectl and an HTTPS conversion webhook on
loopback (``tests/webhook_server.py``).

The Endpoint kind has two versions: v1 with ``spec.host`` and ``spec.port``, v2 with
``spec.hostPort`` ("host:port"); v1 is the storage version. Objects written in either
version are stored in v1 and read in either (get, list, watch, kubectl); a failing
webhook and a wrong answer give upstream's errors; a bad webhook configuration is
refused with upstream's messages."""

from __future__ import annotations

import json

import pytest
import yaml

from apiserver_min.api import names
from tests.apiserver_fixtures import ApiServerProcess, Kubectl, create_namespace
from tests.helpers import uniq, wait_for
from tests.webhook_server import CONVERT_FAILURE, WebhookServer

GROUP = "conv.example.com"
CRD_PATH = f"/apis/{names.APIEXTENSIONS_GROUP}/v1/customresourcedefinitions"


def endpoint_crd(plural: str, kind: str, webhook: dict | None) -> dict:
    def version(name: str, storage: bool, spec_props: dict) -> dict:
        return {
            "name": name,
            "served": True,
            "storage": storage,
            "schema": {
                "openAPIV3Schema": {
                    "type": "object",
                    "properties": {"spec": {"type": "object", "properties": spec_props}},
                }
            },
        }

    spec: dict = {
        "group": GROUP,
        "scope": "Namespaced",
        "names": {"plural": plural, "singular": kind.lower(), "kind": kind},
        "versions": [
            version("v1", True, {"host": {"type": "string"}, "port": {"type": "integer"}}),
            version("v2", False, {"hostPort": {"type": "string"}}),
        ],
    }
    if webhook is not None:
        spec["conversion"] = {"strategy": "Webhook", "webhook": webhook}
    return {
        "apiVersion": f"{names.APIEXTENSIONS_GROUP}/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": spec,
    }


def define(server: ApiServerProcess, plural: str, kind: str, webhook: dict) -> None:
    server.json("POST", CRD_PATH, endpoint_crd(plural, kind, webhook), expect=201)

    def ready() -> bool:
        status, doc = server.json("GET", f"/apis/{GROUP}/v2")
        return status == 200 and any(r["name"] == plural for r in doc["resources"])

    wait_for(ready, timeout=10, what=f"{plural} served")


@pytest.fixture(scope="module")
def hook():
    with WebhookServer() as w:
        yield w


@pytest.fixture(scope="module")
def endpoints(apiserver, hook):
    webhook = {"clientConfig": hook.client_config("/convert"), "conversionReviewVersions": ["v9", "v1"]}
    define(apiserver, "endpoints", "Endpoint", webhook)
    return "endpoints"


@pytest.fixture
def ns(apiserver):
    name = uniq("conv")
    create_namespace(apiserver, name)
    return name


def stored(server: ApiServerProcess, ns: str, plural: str, name: str) -> dict:
    """The object as stored: read in the storage version v1, which needs no conversion
    (no review is sent), so the stored object comes back as it is."""
    _, obj = server.json("GET", f"/apis/{GROUP}/v1/namespaces/{ns}/{plural}/{name}", expect=200)
    return obj


def test_written_in_either_version_read_in_the_other(apiserver, hook, endpoints, ns):
    v1 = f"/apis/{GROUP}/v1/namespaces/{ns}/endpoints"
    v2 = f"/apis/{GROUP}/v2/namespaces/{ns}/endpoints"
    before = len(hook.reviews_for("/convert"))
    # Written in v2: converted to the storage version v1 before it is stored.
    body = {"apiVersion": f"{GROUP}/v2", "kind": "Endpoint", "metadata": {"name": "a"}, "spec": {"hostPort": "x:80"}}
    _, created = apiserver.json("POST", v2, body, expect=201)
    assert created["apiVersion"] == f"{GROUP}/v2" and created["spec"] == {"hostPort": "x:80"}
    reviews = hook.reviews_for("/convert")[before:]
    assert reviews[0]["apiVersion"] == f"{names.APIEXTENSIONS_GROUP}/v1"
    assert reviews[0]["kind"] == "ConversionReview"
    assert reviews[0]["request"]["desiredAPIVersion"] == f"{GROUP}/v1"
    assert [o["spec"] for o in reviews[0]["request"]["objects"]] == [{"hostPort": "x:80"}]
    a = stored(apiserver, ns, "endpoints", "a")
    assert a["apiVersion"] == f"{GROUP}/v1" and a["spec"] == {"host": "x", "port": 80}
    assert a["metadata"]["labels"] == {"converted-to": "v1"}  # labels are the webhook's to change
    # Written in v1, read in v2.
    body = {
        "apiVersion": f"{GROUP}/v1",
        "kind": "Endpoint",
        "metadata": {"name": "b"},
        "spec": {"host": "y", "port": 443},
    }
    apiserver.json("POST", v1, body, expect=201)
    _, b = apiserver.json("GET", f"{v2}/b", expect=200)
    assert b["apiVersion"] == f"{GROUP}/v2" and b["spec"] == {"hostPort": "y:443"}
    # A list in v2: both objects, converted in one review.
    before = len(hook.reviews_for("/convert"))
    _, lst = apiserver.json("GET", v2, expect=200)
    assert lst["apiVersion"] == f"{GROUP}/v2" and lst["kind"] == "EndpointList"
    assert sorted((i["metadata"]["name"], i["apiVersion"], i["spec"]["hostPort"]) for i in lst["items"]) == [
        ("a", f"{GROUP}/v2", "x:80"),
        ("b", f"{GROUP}/v2", "y:443"),
    ]
    lists = [r for r in hook.reviews_for("/convert")[before:] if len(r["request"]["objects"]) == 2]
    assert len(lists) == 1
    # A watch in v2.
    with apiserver.watch(f"{v2}?watch=1&resourceVersion=0") as w:
        events = w.events(2)
    assert sorted((e["type"], e["object"]["apiVersion"], e["object"]["spec"]["hostPort"]) for e in events) == [
        ("ADDED", f"{GROUP}/v2", "x:80"),
        ("ADDED", f"{GROUP}/v2", "y:443"),
    ]
    # An update in v2 of an object stored in v1.
    b["spec"]["hostPort"] = "z:8443"
    _, updated = apiserver.json("PUT", f"{v2}/b", b, expect=200)
    assert updated["spec"] == {"hostPort": "z:8443"}
    assert stored(apiserver, ns, "endpoints", "b")["spec"] == {"host": "z", "port": 8443}
    # A merge patch in v2: applied to the object converted to v2, stored in v1.
    hdr = {"Content-Type": "application/merge-patch+json"}
    _, patched = apiserver.json("PATCH", f"{v2}/b", {"spec": {"hostPort": "w:9"}}, hdr, expect=200)
    assert patched["apiVersion"] == f"{GROUP}/v2" and patched["spec"] == {"hostPort": "w:9"}
    assert stored(apiserver, ns, "endpoints", "b")["spec"] == {"host": "w", "port": 9}


def test_kubectl_reads_both_versions(apiserver, endpoints, ns, tmp_path):
    kctl = Kubectl(apiserver, tmp_path)
    obj = {"apiVersion": f"{GROUP}/v2", "kind": "Endpoint", "metadata": {"name": "k"}, "spec": {"hostPort": "h:1"}}
    kctl("create", "-n", ns, "-f", "-", input=yaml.safe_dump(obj), check=True)
    got = json.loads(kctl("get", "-n", ns, f"endpoints.v1.{GROUP}", "k", "-o", "json", check=True).stdout)
    assert got["apiVersion"] == f"{GROUP}/v1" and got["spec"] == {"host": "h", "port": 1}
    got = json.loads(kctl("get", "-n", ns, f"endpoints.v2.{GROUP}", "-o", "json", check=True).stdout)
    assert [i["spec"] for i in got["items"]] == [{"hostPort": "h:1"}]
    # Server-side apply in v2 on the object stored in v1: merged in v2.
    obj["spec"]["hostPort"] = "h:2"
    kctl("apply", "--server-side", "--force-conflicts", "-n", ns, "-f", "-", input=yaml.safe_dump(obj), check=True)
    assert stored(apiserver, ns, "endpoints", "k")["spec"] == {"host": "h", "port": 2}


@pytest.mark.parametrize(
    "path, message",
    [
        ("/convert-fail", CONVERT_FAILURE),
        ("/convert-short", "returned 0 objects, expected 1"),
        ("/convert-rename", "returned invalid converted object at index 0: must have the same name: f != renamed"),
    ],
)
def test_failing_webhook_gives_upstreams_error(apiserver, hook, ns, path, message):
    plural = uniq("ep").replace("-", "")
    kind = "E" + plural[1:]
    define(apiserver, plural, kind, {"clientConfig": hook.client_config(path), "conversionReviewVersions": ["v1"]})
    body = {"apiVersion": f"{GROUP}/v2", "kind": kind, "metadata": {"name": "f"}, "spec": {"hostPort": "x:1"}}
    status, doc = apiserver.json("POST", f"/apis/{GROUP}/v2/namespaces/{ns}/{plural}", body)
    assert status == 500 and doc["reason"] == "InternalError", doc
    what = f"conversion webhook for {GROUP}/v2, Kind={kind}"
    if path == "/convert-fail":
        assert doc["message"] == f"{what} failed: {message}"
        # Stored in v1 (nothing to convert), then read in v2: get, list and watch fail alike.
        body = {**body, "apiVersion": f"{GROUP}/v1", "spec": {"host": "x", "port": 1}}
        apiserver.json("POST", f"/apis/{GROUP}/v1/namespaces/{ns}/{plural}", body, expect=201)
        v2 = f"/apis/{GROUP}/v2/namespaces/{ns}/{plural}"
        from_v1 = f"conversion webhook for {GROUP}/v1, Kind={kind} failed: {message}"
        status, doc = apiserver.json("GET", f"{v2}/f")
        assert (status, doc["message"]) == (500, from_v1)
        status, doc = apiserver.json("GET", v2)
        assert (status, doc["message"]) == (
            500,
            f"conversion webhook for {GROUP}/v1, Kind={kind}List failed: {message}",
        )
        with apiserver.watch(f"{v2}?watch=1&resourceVersion=0") as w:
            ev = w.next()
        assert ev is not None and ev["type"] == "ERROR" and ev["object"]["message"] == from_v1
        # The webhook's address changed: the definition is served with the new one.
        _, crd = apiserver.json("GET", f"{CRD_PATH}/{plural}.{GROUP}", expect=200)
        crd["spec"]["conversion"]["webhook"]["clientConfig"] = hook.client_config("/convert")
        apiserver.json("PUT", f"{CRD_PATH}/{plural}.{GROUP}", crd, expect=200)
        wait_for(lambda: apiserver.json("GET", f"{v2}/f")[0] == 200, timeout=10, what="the new webhook used")
        assert apiserver.json("GET", f"{v2}/f")[1]["spec"] == {"hostPort": "x:1"}
    else:
        assert doc["message"] == f"{what} {message}"


def test_unreachable_webhook(apiserver, ns):
    plural = uniq("ep").replace("-", "")
    kind = "E" + plural[1:]
    url = "https://127.0.0.1:1/convert"
    define(apiserver, plural, kind, {"clientConfig": {"url": url}, "conversionReviewVersions": ["v1"]})
    body = {"apiVersion": f"{GROUP}/v2", "kind": kind, "metadata": {"name": "u"}, "spec": {"hostPort": "x:1"}}
    status, doc = apiserver.json("POST", f"/apis/{GROUP}/v2/namespaces/{ns}/{plural}", body)
    assert status == 500, doc
    assert doc["message"].startswith(
        f'conversion webhook for {GROUP}/v2, Kind={kind} failed: Post "{url}?timeout=30s": '
    )


def test_invalid_webhook_configuration_is_refused(apiserver, kctl_home):
    crd = endpoint_crd("badhooks", "BadHook", {"clientConfig": {"url": "http://127.0.0.1/x"}})
    status, doc = apiserver.json("POST", CRD_PATH, crd)
    assert status == 422, doc
    assert doc["message"] == (
        f'CustomResourceDefinition.{names.APIEXTENSIONS_GROUP} "badhooks.{GROUP}" is invalid: ['
        "spec.conversion.webhookClientConfig.url: Invalid value: \"http\": 'https' is the only allowed URL scheme, "
        "spec.conversion.conversionReviewVersions: Required value]"
    )
    kctl = Kubectl(apiserver, kctl_home)
    result = kctl("create", "-f", "-", input=yaml.safe_dump(crd))
    assert result.returncode != 0
    assert (
        "spec.conversion.webhookClientConfig.url: Invalid value: \"http\": 'https' is the only allowed URL scheme"
        in (result.stderr)
    )


@pytest.fixture
def kctl_home(tmp_path):
    return tmp_path
