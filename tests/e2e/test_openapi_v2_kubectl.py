"""``/openapi/v2`` in protobuf form as the real kubectl (v1.32) reads it.

kubectl downloads the document with ``Accept:
application/com.github.proto-openapi.spec.v2@v1.0+protobuf`` only, unmarshals
gnostic's ``openapi_v2.Document`` and parses every definition with
kube-openapi's ``util/proto`` before it looks anything up:

* ``explain --output=plaintext-openapiv2`` reads it directly;
* ``create -f`` of a create-only review kind (no ``patch`` operation, so no
  ``fieldValidation`` for the server to honour) validates client-side against
  it under the default ``--validate=strict``: unknown fields fail in kubectl
  with its ``ValidationError(...): unknown field`` message, ``--validate=warn``
  skips the check with a warning.

Before that client-side check kubectl v1.32 falls back from the v3 documents
(no patch path for the review) to its v2 verifier, which lists
``customresourcedefinitions`` in ``apiextensions.k8s.io/v1`` (its CRD finder,
hard-coded); the server answers that list with the custom resource definitions
it serves: none.
"""

from __future__ import annotations

import json

import pytest

MEDIA_V2_PROTOBUF = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"
MEDIA_V2_PROTOBUF_DOT = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
CRD_LIST = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def logged(stderr: str, *parts: str) -> bool:
    """Whether one line of kubectl's -v=6 log names every part (method, path, status)."""
    return any(all(p in line for p in parts) for line in stderr.splitlines())


def ok(result) -> str:
    assert result.returncode == 0, f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    return result.stdout


def token_review(spec: str = "{token: abc}") -> str:
    return f"apiVersion: authentication.orch.io/v1\nkind: TokenReview\nspec: {spec}\n"


def subject_access_review(extra: str = "") -> str:
    return (
        "apiVersion: authorization.orch.io/v1\nkind: SubjectAccessReview\nspec:\n  user: alice\n"
        f"  resourceAttributes: {{verb: get, resource: pods, namespace: default}}\n{extra}"
    )


# --- the document itself ----------------------------------------------------------------------


def test_get_raw_v2_is_still_json(kubectl):
    doc = json.loads(ok(kubectl("get", "--raw", "/openapi/v2")))
    assert doc["swagger"] == "2.0"
    assert "io.k8s.api.authentication.v1.TokenReview" in doc["definitions"]
    assert "/apis/authentication.orch.io/v1/tokenreviews" in doc["paths"]


def test_protobuf_answer_over_https(apiserver):
    status, headers, body = apiserver.request("GET", "/openapi/v2", headers={"Accept": MEDIA_V2_PROTOBUF})
    assert status == 200 and headers["content-type"] == MEDIA_V2_PROTOBUF_DOT
    assert body[:5] == b"\x0a\x032.0"  # Document.swagger (field 1) = "2.0"
    _, json_headers, _ = apiserver.request("GET", "/openapi/v2")
    assert headers["etag"] == json_headers["etag"]
    status, _, _ = apiserver.request(
        "GET", "/openapi/v2", headers={"Accept": MEDIA_V2_PROTOBUF, "If-None-Match": headers["etag"]}
    )
    assert status == 304
    status, _, _ = apiserver.request("GET", "/openapi/v2", headers={"Accept": "application/yaml"})
    assert status == 406


def test_explain_reads_the_protobuf_document(kubectl):
    res = kubectl("explain", "pods.spec.containers.ports", "--output=plaintext-openapiv2", "-v=6")
    out = ok(res)
    assert logged(res.stderr, "GET", "/openapi/v2?", "200 OK"), res.stderr
    assert "KIND:     Pod" in out
    assert "containerPort\t<integer> -required-" in out
    assert "Port number on the pod's IP address" in out
    out = ok(kubectl("explain", "tokenreviews.spec", "--output=plaintext-openapiv2"))
    assert "KIND:     TokenReview" in out and "VERSION:  authentication.orch.io/v1" in out
    assert "token\t<string>" in out and "audiences\t<[]string>" in out
    out = ok(kubectl("explain", "deployments.spec.strategy.rollingUpdate", "--output=plaintext-openapiv2"))
    assert "maxSurge\t<string>" in out  # IntOrString is a string in Swagger 2.0


# --- review kinds: kubectl's client-side validation -----------------------------------------------


def test_crd_list_is_empty(kubectl):
    lst = json.loads(ok(kubectl("get", "--raw", CRD_LIST)))
    assert lst["kind"] == "CustomResourceDefinitionList" and lst["items"] == []
    assert lst["apiVersion"] == "apiextensions.k8s.io/v1" and int(lst["metadata"]["resourceVersion"]) > 0
    res = kubectl("get", "--raw", CRD_LIST + "/x")
    assert res.returncode == 1 and "NotFound" in res.stderr


def test_token_review_with_default_validation(kubectl):
    res = kubectl("create", "-f", "-", "-o", "json", "-v=6", input=token_review())
    review = json.loads(ok(res))
    assert review["kind"] == "TokenReview"
    assert review["status"]["authenticated"] is False and review["status"]["error"]
    # validated against the protobuf v2 document, then sent
    assert logged(res.stderr, "GET", "/openapi/v2?", "200 OK"), res.stderr
    assert logged(res.stderr, "GET", CRD_LIST, "200 OK"), res.stderr
    assert logged(res.stderr, "POST", "/apis/authentication.orch.io/v1/tokenreviews?", "201 Created"), res.stderr


def test_subject_access_review_with_default_validation(kubectl):
    review = json.loads(ok(kubectl("create", "-f", "-", "-o", "json", input=subject_access_review())))
    assert review["kind"] == "SubjectAccessReview"
    assert review["status"]["allowed"] is False
    assert review["spec"]["resourceAttributes"] == {"namespace": "default", "resource": "pods", "verb": "get"}


@pytest.mark.parametrize(
    "manifest,message",
    [
        (
            token_review("{token: abc, bogus: 1}"),
            'ValidationError(TokenReview.spec): unknown field "bogus" in io.k8s.api.authentication.v1.TokenReviewSpec',
        ),
        (
            subject_access_review("  usr: bob\n"),
            'ValidationError(SubjectAccessReview.spec): unknown field "usr" in '
            "io.k8s.api.authorization.v1.SubjectAccessReviewSpec",
        ),
        (
            token_review("{token: abc, audiences: api}"),
            "ValidationError(TokenReview.spec.audiences): invalid type for "
            'io.k8s.api.authentication.v1.TokenReviewSpec.audiences: got "string", expected "array"',
        ),
    ],
)
def test_schema_errors_fail_in_kubectl(kubectl, manifest, message):
    res = kubectl("create", "-f", "-", "-v=6", input=manifest)
    assert res.returncode == 1, res
    assert "error validating data" in res.stderr and message in res.stderr, res.stderr
    assert not logged(res.stderr, "POST"), res.stderr  # never sent


def test_validate_warn_skips_the_client_side_check(kubectl):
    res = kubectl("create", "-f", "-", "--validate=warn", input=token_review("{token: abc, bogus: 1}"))
    assert "tokenreview.authentication.orch.io/<unknown> created" in ok(res)
    assert "cannot perform warn validation if server-side field validation is unsupported" in res.stderr


def test_validate_false_needs_no_document(kubectl):
    res = kubectl("create", "-f", "-", "--validate=false", "-v=6", input=token_review("{token: abc, bogus: 1}"))
    ok(res)
    assert not logged(res.stderr, "/openapi/") and not logged(res.stderr, CRD_LIST), res.stderr
