"""The Status error object: the shape kubectl parses, and upstream's messages."""

from __future__ import annotations

import pytest

from apiserver_min.api import status as st


def test_failure_status_shape():
    s = st.not_found("pods", "web").to_status()
    assert s["kind"] == "Status"
    assert s["apiVersion"] == "v1"
    assert s["metadata"] == {}
    assert s["status"] == "Failure"
    assert s["message"] == 'pods "web" not found'
    assert s["reason"] == "NotFound"
    assert s["code"] == 404
    assert s["details"] == {"name": "web", "kind": "pods"}


def test_success_status_shape():
    s = st.success_status({"name": "web", "kind": "pods", "uid": "u-1"})
    assert s == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": {"name": "web", "kind": "pods", "uid": "u-1"},
        "code": 200,
    }
    assert "message" not in st.success_status() and "reason" not in st.success_status()


def test_not_found_in_a_group():
    e = st.not_found("deployments", "web", "apps")
    assert (e.code, e.reason) == (404, "NotFound")
    assert e.message == 'deployments.apps "web" not found'
    assert e.to_status()["details"] == {"name": "web", "group": "apps", "kind": "deployments"}
    assert str(e) == e.message


def test_already_exists():
    e = st.already_exists("namespaces", "demo")
    assert (e.code, e.reason, e.message) == (409, "AlreadyExists", 'namespaces "demo" already exists')


def test_conflict_default_and_custom_detail():
    e = st.conflict("pods", "web")
    assert (e.code, e.reason) == (409, "Conflict")
    assert e.message == (
        'Operation cannot be fulfilled on pods "web": the object has been modified; '
        "please apply your changes to the latest version and try again"
    )
    e = st.conflict("leases", "n1", "coordination.orch.io", detail="precondition failed")
    assert e.message == 'Operation cannot be fulfilled on leases.coordination.orch.io "n1": precondition failed'


def test_invalid_one_cause():
    cause = {"reason": "FieldValueRequired", "message": "Required value", "field": "spec.containers"}
    e = st.invalid("Pod", "web", [cause])
    s = e.to_status()
    assert s["code"] == 422 and s["reason"] == "Invalid"
    assert s["message"] == 'Pod "web" is invalid: spec.containers: Required value'
    assert s["details"] == {"name": "web", "kind": "Pod", "causes": [cause]}


def test_invalid_several_causes_in_a_group():
    causes = [
        {"reason": "FieldValueRequired", "message": "Required value", "field": "spec.selector"},
        {"reason": "FieldValueInvalid", "message": "Invalid value: -1: must be >= 0", "field": "spec.replicas"},
    ]
    e = st.invalid("Deployment", "web", causes, group="apps")
    assert e.message == (
        'Deployment.apps "web" is invalid: [spec.selector: Required value, '
        "spec.replicas: Invalid value: -1: must be >= 0]"
    )
    details = e.to_status()["details"]
    assert details["group"] == "apps" and details["kind"] == "Deployment"
    assert [c["field"] for c in details["causes"]] == ["spec.selector", "spec.replicas"]
    for c in details["causes"]:
        assert set(c) == {"reason", "message", "field"}


def test_invalid_cause_without_field_and_no_causes():
    e = st.invalid("Pod", "web", [{"reason": "FieldValueForbidden", "message": "may not be set"}])
    assert e.message == 'Pod "web" is invalid: may not be set'
    e = st.invalid("Pod", "web", [])
    assert e.message == 'Pod "web" is invalid: invalid object'
    assert "causes" not in e.to_status()["details"]


@pytest.mark.parametrize(
    "error, code, reason",
    [
        (st.bad_request("bad"), 400, "BadRequest"),
        (st.unauthorized(), 401, "Unauthorized"),
        (st.forbidden_plain("no"), 403, "Forbidden"),
        (st.method_not_allowed(), 405, "MethodNotAllowed"),
        (st.not_acceptable("no"), 406, "NotAcceptable"),
        (st.gone("too old resource version: 1 (5)"), 410, "Expired"),
        (st.request_entity_too_large("big"), 413, "RequestEntityTooLarge"),
        (st.unsupported_media_type("no"), 415, "UnsupportedMediaType"),
        (st.too_many_requests("slow down", 3), 429, "TooManyRequests"),
        (st.internal("boom"), 500, "InternalError"),
        (st.service_unavailable("later"), 503, "ServiceUnavailable"),
        (st.timeout("slow"), 504, "Timeout"),
    ],
)
def test_every_constructor_has_its_code_and_reason(error, code, reason):
    s = error.to_status()
    assert (s["code"], s["reason"], s["status"]) == (code, reason, "Failure")
    assert s["kind"] == "Status" and s["apiVersion"] == "v1" and s["message"]


def test_forbidden_names_what_was_refused():
    e = st.forbidden("secrets", "token", "", 'User "bob" cannot get resource "secrets"')
    assert e.message == 'secrets "token" is forbidden: User "bob" cannot get resource "secrets"'
    e = st.forbidden("deployments", "", "apps", "no")
    assert e.message == "deployments.apps is forbidden: no"


def test_retry_after_goes_into_details_and_headers():
    e = st.too_many_requests("slow down", retry_after=7)
    assert e.headers["Retry-After"] == "7"
    assert e.to_status()["details"]["retryAfterSeconds"] == 7
    e = st.too_large_resource_version(100, 42)
    s = e.to_status()
    assert s["code"] == 504 and s["message"] == "Too large resource version: 100, current: 42"
    assert s["details"]["causes"][0]["reason"] == "ResourceVersionTooLarge"
    assert e.headers["Retry-After"] == "1"


def test_internal_error_wording():
    e = st.internal("disk full")
    assert e.message == "Internal error occurred: disk full"
    assert e.to_status()["details"]["causes"] == [{"message": "disk full"}]


def test_bad_request_causes():
    cause = {"reason": "FieldValueDuplicate", "message": 'duplicate field "x"', "field": "x"}
    assert st.bad_request("no", [cause]).to_status()["details"] == {"causes": [cause]}
    assert "details" not in st.bad_request("no").to_status()
