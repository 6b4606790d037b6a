"""Secrets in a real orch-apiserver: stringData is written into data, never stored."""

from __future__ import annotations

import base64

import pytest

from tests.apiserver_fixtures import create_namespace
from tests.helpers import uniq


@pytest.fixture
def ns(apiserver):
    name = uniq("secrets")
    create_namespace(apiserver, name)
    return name


def test_string_data_becomes_data(apiserver, kubectl, ns):
    manifest = (
        f"apiVersion: v1\nkind: Secret\nmetadata: {{name: creds, namespace: {ns}}}\n"
        "stringData: {password: s3cret}\ndata: {user: YWRtaW4=}\n"
    )
    res = kubectl("apply", "-f", "-", input=manifest, check=True)
    assert "secret/creds created" in res.stdout
    _, secret = apiserver.json("GET", f"/api/v1/namespaces/{ns}/secrets/creds", expect=200)
    assert "stringData" not in secret
    assert secret["data"] == {"password": base64.b64encode(b"s3cret").decode(), "user": "YWRtaW4="}
    # A second apply that changes stringData updates data.
    kubectl("apply", "-f", "-", input=manifest.replace("s3cret", "n3w"), check=True)
    _, secret = apiserver.json("GET", f"/api/v1/namespaces/{ns}/secrets/creds", expect=200)
    assert base64.b64decode(secret["data"]["password"]) == b"n3w"


def test_a_tls_secret_needs_its_key(apiserver, ns):
    body = {"metadata": {"name": "t"}, "type": "kubernetes.io/tls", "data": {"tls.crt": "eA=="}}
    code, status = apiserver.json("POST", f"/api/v1/namespaces/{ns}/secrets", body)
    assert code == 422
    assert any(c["field"] == "data[tls.key]" for c in status["details"]["causes"])
