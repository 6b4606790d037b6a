"""ImagePolicyWebhook against a real ``orch-apiserver`` and an HTTPS image policy
backend on 127.0.0.1: allowed and denied images (the refusal as kubectl shows it),
the ImageReview's content (images of all containers, only the image-policy
annotations, the namespace) and the answer cache."""

from __future__ import annotations

import json

import pytest
import yaml

from apiserver_min.api import names
from tests.apiserver_fixtures import APISERVER_BIN, ApiServerProcess, Kubectl, create_namespace
from tests.components import free_port
from tests.helpers import uniq
from tests.webhook_server import WebhookServer

POLICY_ANNOTATION = f"team{names.IMAGE_POLICY_ANNOTATION_DOMAIN}ticket"


@pytest.fixture(scope="module")
def backend():
    with WebhookServer() as w:
        yield w


@pytest.fixture(scope="module")
def server(tmp_path_factory, backend):
    if not APISERVER_BIN.exists():
        pytest.skip(f"{APISERVER_BIN} missing")
    tmp = tmp_path_factory.mktemp("imagepolicy")
    orchconfig = tmp / "backend.orchconfig"
    orchconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "backend",
                        "cluster": {"server": backend.url("/review"), "certificate-authority-data": backend.ca_bundle},
                    }
                ],
                "users": [{"name": "apiserver", "user": {"token": "secret-token"}}],
                "contexts": [{"name": "default", "context": {"cluster": "backend", "user": "apiserver"}}],
                "current-context": "default",
            }
        )
    )
    config = tmp / "admission.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "apiVersion": f"apiserver.config.{names.DOMAIN}/v1",
                "kind": "AdmissionConfiguration",
                "plugins": [
                    {
                        "name": "ImagePolicyWebhook",
                        "configuration": {
                            "imagePolicy": {
                                "kubeConfigFile": str(orchconfig),
                                "allowTTL": 50,
                                "denyTTL": 50,
                                "retryBackoff": 500,
                                "defaultAllow": False,
                            }
                        },
                    }
                ],
            }
        )
    )
    s = ApiServerProcess(
        tmp / "data",
        free_port(),
        extra_args=["--admission-control-config-file", str(config), "--enable-admission-plugins=ImagePolicyWebhook"],
    )
    with s:
        yield s


def pod(name: str, image: str, init_image: str = "good/init") -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": {POLICY_ANNOTATION: "T-1", "unrelated": "x"}},
        "spec": {
            "initContainers": [{"name": "init", "image": init_image}],
            "containers": [{"name": "main", "image": image}],
        },
    }


def image_reviews(backend) -> list[dict]:
    return [r for _, r in list(backend.reviews) if r.get("kind") == "ImageReview"]


def test_allowed_images_are_admitted_with_the_review_as_the_spec_says(server, backend):
    ns = uniq("ip")
    create_namespace(server, ns)
    server.json("POST", f"/api/v1/namespaces/{ns}/pods", pod("ok", "good/app"), expect=201)
    review = [r for r in image_reviews(backend) if r["spec"].get("namespace") == ns][-1]
    assert review["apiVersion"] == f"{names.IMAGEPOLICY_GROUP}/v1alpha1"
    assert review["spec"]["containers"] == [{"image": "good/app"}, {"image": "good/init"}]
    assert review["spec"]["annotations"] == {POLICY_ANNOTATION: "T-1"}
    # The same images, annotations and namespace again: the cached answer is used.
    before = len(image_reviews(backend))
    server.json("POST", f"/api/v1/namespaces/{ns}/pods", pod("ok2", "good/app"), expect=201)
    assert len(image_reviews(backend)) == before


def test_denied_images_are_refused_with_the_backends_reason(server, backend, tmp_path):
    ns = uniq("ip")
    create_namespace(server, ns)
    status, doc = server.json("POST", f"/api/v1/namespaces/{ns}/pods", pod("bad", "evil/app"))
    assert (status, doc["reason"]) == (403, "Forbidden")
    assert doc["message"] == (
        'pods "bad" is forbidden: image policy webhook backend denied one or more images: image evil/app is not allowed'
    )
    result = Kubectl(server, tmp_path)(
        "create", "-n", ns, "-f", "-", input=json.dumps(pod("bad2", "good/x", "evil/init"))
    )
    assert result.returncode != 0
    assert (
        'pods "bad2" is forbidden: image policy webhook backend denied one or more images: image evil/init is not allowed'
        in result.stderr
    )
