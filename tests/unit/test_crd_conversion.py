"""The conversion webhook client of custom resources (``apiextensions.conversion``)
against the test HTTPS webhook on loopback: what it sends, and each check of the answer
with upstream's words."""

from __future__ import annotations

import asyncio
import json

import pytest

from apiserver_min.api import names
from apiserver_min.api.kinds import REGISTRY
from apiserver_min.apiextensions.conversion import ConversionError, WebhookConverter
from apiserver_min.storage.cacher import WatchCache
from apiserver_min.storage.keys import key_prefix, object_key
from apiserver_min.webhookclient.lookup import ClusterLookup
from tests.webhook_server import CONVERT_FAILURE, WebhookServer

GROUP = "conv.example.com"
WHAT = f"conversion webhook for {GROUP}/v1, Kind=Endpoint"


@pytest.fixture(scope="module")
def hook():
    with WebhookServer() as w:
        w.hang_seconds = 3.0
        yield w


def endpoint(name: str, **spec) -> dict:
    md = {"name": name, "namespace": "default", "uid": f"uid-{name}", "generation": 1, "labels": {"app": "x"}}
    return {"apiVersion": f"{GROUP}/v1", "kind": "Endpoint", "metadata": md, "spec": spec}


def convert(hook: WebhookServer, path: str, objs: list[dict], versions=("v1",), timeout: float = 30.0) -> list[dict]:
    webhook = {"clientConfig": hook.client_config(path), "conversionReviewVersions": list(versions)}
    return asyncio.run(WebhookConverter(GROUP, webhook, timeout).convert(objs, "v2"))


def test_converts_a_batch_in_one_review_and_keeps_metadata(hook):
    objs = [endpoint("a", host="x", port=1), endpoint("b", host="y", port=2)]
    before = len(hook.reviews_for("/convert"))
    out = convert(hook, "/convert", objs, versions=("v7", "v1beta1", "v1"))
    assert [o["spec"] for o in out] == [{"hostPort": "x:1"}, {"hostPort": "y:2"}]
    assert all(o["apiVersion"] == f"{GROUP}/v2" for o in out)
    assert out[0]["metadata"]["labels"] == {"app": "x", "converted-to": "v2"}
    (review,) = hook.reviews_for("/convert")[before:]
    # The first of the webhook's versions this server knows.
    assert review["apiVersion"] == f"{names.APIEXTENSIONS_GROUP}/v1beta1"
    assert review["request"]["desiredAPIVersion"] == f"{GROUP}/v2"
    assert [o["metadata"]["name"] for o in review["request"]["objects"]] == ["a", "b"]
    assert review["request"]["uid"]


def test_objects_already_in_the_desired_version_are_not_sent(hook):
    done = {**endpoint("c"), "apiVersion": f"{GROUP}/v2"}
    before = len(hook.reviews_for("/convert"))
    assert convert(hook, "/convert", [done]) == [done]
    assert len(hook.reviews_for("/convert")) == before


def test_only_labels_and_annotations_may_change(hook):
    (out,) = convert(hook, "/convert-meta", [endpoint("d", host="h", port=3)])
    assert out["metadata"]["annotations"] == {"converted": "yes"}
    assert out["metadata"]["generation"] == 1


@pytest.mark.parametrize(
    "path, message",
    [
        ("/convert-fail", f"{WHAT} failed: {CONVERT_FAILURE}"),
        ("/convert-short", f"{WHAT} returned 0 objects, expected 1"),
        (
            "/convert-rename",
            f"{WHAT} returned invalid converted object at index 0: must have the same name: e != renamed",
        ),
        (
            "/convert-kind",
            f"{WHAT} returned invalid converted object at index 0: invalid kind (expected Endpoint, received Other)",
        ),
        (
            "/convert-version",
            f"{WHAT} returned invalid converted object at index 0: invalid groupVersion (expected {GROUP}/v2, "
            "received other.example.com/v1)",
        ),
    ],
)
def test_bad_answers(hook, path, message):
    with pytest.raises(ConversionError) as err:
        convert(hook, path, [endpoint("e", host="h", port=4)])
    assert str(err.value) == message
    assert err.value.api_error().code == 500


def test_wrong_uid(hook):
    with pytest.raises(ConversionError, match=rf'^{WHAT} failed: expected response.uid="[-0-9a-f]+", got "not-yours"$'):
        convert(hook, "/convert-uid", [endpoint("f")])


def test_timeout(hook):
    url = hook.url("/convert-hang")
    with pytest.raises(ConversionError) as err:
        convert(hook, "/convert-hang", [endpoint("g")], timeout=1)
    assert str(err.value) == f'{WHAT} failed: Post "{url}?timeout=1s": context deadline exceeded'


def test_unknown_certificate_authority(hook):
    webhook = {"clientConfig": {"url": hook.url("/convert")}, "conversionReviewVersions": ["v1"]}
    with pytest.raises(ConversionError) as err:
        asyncio.run(WebhookConverter(GROUP, webhook).convert([endpoint("h")], "v2"))
    assert str(err.value).startswith(f'{WHAT} failed: Post "{hook.url("/convert")}?timeout=30s": tls: ')


def test_a_service_reference_is_called_at_a_ready_endpoint_as_the_service_name():
    cache = WatchCache(None, list(REGISTRY.kinds), key_prefix)  # type: ignore[arg-type]

    def put(resource: str, obj: dict) -> None:
        kind = REGISTRY.by_resource("", "v1", resource)
        assert kind is not None
        key = object_key(kind, "ops", obj["metadata"]["name"])
        c = cache.cache(key_prefix(kind))
        c.items[key] = c.make_entry(key, json.dumps(obj).encode(), 7)

    with WebhookServer(dns=("conv.ops.svc",)) as server:
        put("services", {"metadata": {"name": "conv", "namespace": "ops"}, "spec": {"ports": [{"port": 8443}]}})
        put(
            "endpoints",
            {
                "metadata": {"name": "conv", "namespace": "ops"},
                "subsets": [{"addresses": [{"ip": "127.0.0.1"}], "ports": [{"port": server.port}]}],
            },
        )
        service = {"namespace": "ops", "name": "conv", "path": "/convert", "port": 8443}
        webhook = {
            "clientConfig": {"service": service, "caBundle": server.ca_bundle},
            "conversionReviewVersions": ["v1"],
        }
        converter = WebhookConverter(GROUP, webhook)
        converter.lookup = ClusterLookup(cache, REGISTRY, None)
        (out,) = asyncio.run(converter.convert([endpoint("s", host="h", port=5)], "v2"))
        assert out["spec"] == {"hostPort": "h:5"}
        missing = {**service, "name": "gone"}
        converter = WebhookConverter(GROUP, {**webhook, "clientConfig": {"service": missing}})
        converter.lookup = ClusterLookup(cache, REGISTRY, None)
        with pytest.raises(ConversionError) as err:
            asyncio.run(converter.convert([endpoint("t")], "v2"))
        assert str(err.value) == (
            f'{WHAT} failed: Post "https://gone.ops.svc:8443/convert?timeout=30s": service "gone" not found'
        )
