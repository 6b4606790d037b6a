"""Field validation of the create-only review bodies (SubjectAccessReview and
friends, TokenReview), as for any other create: types always checked, unknown
fields warned about (the default Warn) or refused (Strict)."""

from __future__ import annotations

import json

import pytest

from apiserver_min.api import names
from tests.apiserver_fixtures import APISERVER_BIN, ApiServerProcess
from tests.components import free_port

AUTHZ = f"/apis/{names.AUTHORIZATION_GROUP}/v1"
AUTHN = f"/apis/{names.AUTHENTICATION_GROUP}/v1"
SAR = {"spec": {"user": "alice", "resourceAttributes": {"namespace": "default", "verb": "get", "resource": "pods"}}}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    if not APISERVER_BIN.exists():
        pytest.skip(f"{APISERVER_BIN} missing")
    s = ApiServerProcess(tmp_path_factory.mktemp("review-fv"), free_port())
    with s:
        yield s


def post(server, path, body, level=None):
    query = f"?fieldValidation={level}" if level else ""
    status, headers, raw = server.request("POST", path + query, body)
    warnings = [v for k, v in headers.items() if k == "warning"]  # (the fixture keeps one per name)
    return status, warnings, json.loads(raw)


def _with(extra: dict) -> dict:
    body = json.loads(json.dumps(SAR))
    body["spec"].update(extra)
    return body


@pytest.mark.parametrize(
    "path,body,bogus",
    [
        (f"{AUTHZ}/subjectaccessreviews", _with({"bogus": 1}), "spec.bogus"),
        (f"/apis/{names.UPSTREAM_AUTHORIZATION_GROUP}/v1/subjectaccessreviews", _with({"bogus": 1}), "spec.bogus"),
        (f"{AUTHN}/tokenreviews", {"spec": {"token": "abc", "bogus": 1}}, "spec.bogus"),
    ],
)
def test_unknown_fields_warn_by_default_and_fail_under_strict(server, path, body, bogus):
    status, warnings, doc = post(server, path, body)
    assert status == 201, doc
    assert any(f'unknown field \\"{bogus}\\"' in w for w in warnings), warnings
    assert "bogus" not in json.dumps(doc["spec"])  # dropped, as upstream's decoder drops it
    status, _, doc = post(server, path, body, "Strict")
    assert status == 400 and doc["reason"] == "BadRequest", doc
    assert f'unknown field "{bogus}"' in doc["message"]
    status, warnings, _ = post(server, path, body, "Ignore")
    assert status == 201 and not warnings


def test_type_errors_are_400(server):
    status, _, doc = post(server, f"{AUTHZ}/subjectaccessreviews", _with({"user": 5}))
    assert status == 400 and "cannot unmarshal number" in doc["message"], doc
    status, _, doc = post(server, f"{AUTHN}/tokenreviews", {"spec": {"token": "abc", "audiences": "x"}})
    assert status == 400 and "cannot unmarshal string" in doc["message"], doc


def test_clean_reviews_carry_no_warning(server):
    status, warnings, doc = post(server, f"{AUTHZ}/subjectaccessreviews", SAR)
    assert status == 201 and not warnings and doc["status"] == {"allowed": False}
