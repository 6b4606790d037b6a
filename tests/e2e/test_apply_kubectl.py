"""``kubectl apply --server-side`` against a real orch-apiserver: two field managers,
a conflict naming the field and its manager, ``--force-conflicts`` moving the
ownership, and a removed list item on re-apply."""

from __future__ import annotations

import json
import subprocess

import pytest
import yaml

from tests.apiserver_fixtures import create_namespace
from tests.helpers import uniq


def ok(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0, f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    return result.stdout


@pytest.fixture
def ns(apiserver):
    name = uniq("ssa")
    create_namespace(apiserver, name)
    return name


def deployment(name: str, ns: str, replicas: int, ports: list[int]) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "namespace": ns},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {
                        "containers": [
                            {"name": "web", "image": "busybox:1", "ports": [{"containerPort": p} for p in ports]}
                        ]
                    },
                },
            },
        }
    )


def owners(kubectl, ns: str, name: str) -> dict[str, dict]:
    obj = json.loads(ok(kubectl("get", "deployment", name, "-n", ns, "-o", "json", "--show-managed-fields")))
    return {e["manager"]: e for e in obj["metadata"]["managedFields"]}, obj


def test_server_side_apply_conflict_and_force(kubectl, ns):
    name = uniq("web")
    ok(kubectl("apply", "--server-side", "--field-manager=team-a", "-f", "-", input=deployment(name, ns, 2, [80, 81])))
    mf, obj = owners(kubectl, ns, name)
    assert mf["team-a"]["operation"] == "Apply" and "f:replicas" in mf["team-a"]["fieldsV1"]["f:spec"]

    res = kubectl(
        "apply", "--server-side", "--field-manager=team-b", "-f", "-", input=deployment(name, ns, 5, [80, 81])
    )
    assert res.returncode != 0
    assert "conflict" in res.stderr and '"team-a"' in res.stderr and ".spec.replicas" in res.stderr, res.stderr
    assert owners(kubectl, ns, name)[1]["spec"]["replicas"] == 2

    ok(
        kubectl(
            "apply",
            "--server-side",
            "--field-manager=team-b",
            "--force-conflicts",
            "-f",
            "-",
            input=deployment(name, ns, 5, [80, 81]),
        )
    )
    mf, obj = owners(kubectl, ns, name)
    assert obj["spec"]["replicas"] == 5
    assert "f:replicas" in mf["team-b"]["fieldsV1"]["f:spec"]
    assert "f:replicas" not in mf["team-a"]["fieldsV1"]["f:spec"]

    # team-a now sets replicas to what team-b chose (shared) and drops port 81,
    # which team-b still applies: it stays. Then team-b drops it too: it goes.
    ok(kubectl("apply", "--server-side", "--field-manager=team-a", "-f", "-", input=deployment(name, ns, 5, [80])))

    def ports(o):
        return [p["containerPort"] for p in o["spec"]["template"]["spec"]["containers"][0]["ports"]]

    assert ports(owners(kubectl, ns, name)[1]) == [80, 81]
    ok(kubectl("apply", "--server-side", "--field-manager=team-b", "-f", "-", input=deployment(name, ns, 5, [80])))
    mf, obj = owners(kubectl, ns, name)
    assert ports(obj) == [80]
    assert "f:replicas" in mf["team-a"]["fieldsV1"]["f:spec"] and "f:replicas" in mf["team-b"]["fieldsV1"]["f:spec"]


def test_server_side_apply_dry_run_and_default_manager(kubectl, apiserver, ns):
    name = uniq("cm")
    manifest = yaml.safe_dump(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns}, "data": {"k": "v"}}
    )
    ok(kubectl("apply", "--server-side", "--dry-run=server", "-f", "-", input=manifest))
    status, _, _ = apiserver.request("GET", f"/api/v1/namespaces/{ns}/configmaps/{name}")
    assert status == 404
    ok(kubectl("apply", "--server-side", "-f", "-", input=manifest))
    obj = json.loads(ok(kubectl("get", "configmap", name, "-n", ns, "-o", "json", "--show-managed-fields")))
    assert [(e["manager"], e["operation"]) for e in obj["metadata"]["managedFields"]] == [("kubectl", "Apply")]
